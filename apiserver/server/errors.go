package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"

	"gpucloud/apiserver/placement"
	"gpucloud/apiserver/store"
	"gpucloud/internal/problem"
)

func problemf(status int, typ, title, format string, args ...any) *problem.Details {
	return problem.New(status, typ, title, fmt.Sprintf(format, args...))
}

func notFound(detail string) *problem.Details {
	return problem.New(http.StatusNotFound, "not-found", "Not found", detail)
}

func forbidden(detail string) *problem.Details {
	return problem.New(http.StatusForbidden, "forbidden", "Forbidden", detail)
}

func invalid(field, reason string) *problem.Details {
	return problem.Validation(problem.FieldError{Field: field, Reason: reason})
}

// toProblem maps an error from the store or placement to what the caller sees. Unknown errors
// are 500s whose detail is logged, never sent.
func (s *Server) toProblem(c *gin.Context, err error) *problem.Details {
	var (
		d     *problem.Details
		quota *store.QuotaError
		field *store.FieldError
		state *store.StateError
		inUse *store.InUseError
		confl *store.ConflictError
		noCap *placement.NoCapacityError
	)
	switch {
	case errors.As(err, &d):
		return d
	case errors.Is(err, store.ErrNotFound):
		return notFound("no such resource")
	case errors.As(err, &quota):
		return problem.New(http.StatusForbidden, "quota-exceeded", "Quota exceeded", quota.Error())
	case errors.As(err, &field):
		return invalid(field.Field, field.Reason)
	case errors.As(err, &state):
		return problem.New(http.StatusConflict, "invalid-state", "Invalid state", state.Error())
	case errors.As(err, &inUse):
		return problem.New(http.StatusConflict, "in-use", "In use", inUse.Error())
	case errors.As(err, &confl):
		return problem.New(http.StatusConflict, "conflict", "Conflict", confl.Error())
	case errors.As(err, &noCap):
		d := problem.New(http.StatusServiceUnavailable, "no-capacity", "No capacity", noCap.Error())
		d.Retryable = true
		return d
	case errors.Is(err, context.Canceled) && c.Request.Context().Err() != nil:
		// The client went away; nobody reads this answer and it is not a server fault.
		return problem.New(499, "client-closed-request", "Client closed request", "")
	case store.IsUniqueViolation(err):
		return problem.New(http.StatusConflict, "already-exists", "Already exists", "a resource with that name already exists")
	}
	s.log.Error("request failed", "method", c.Request.Method, "path", c.Request.URL.Path,
		"request_id", c.GetString(requestIDKey), "err", err)
	return problem.New(http.StatusInternalServerError, "internal", "Internal error", "")
}

// fail writes err as a problem and stops the chain.
func (s *Server) fail(c *gin.Context, err error) {
	d := s.toProblem(c, err)
	cp := *d
	cp.RequestID = c.GetString(requestIDKey)
	cp.Instance = c.Request.URL.Path
	problem.Write(c.Writer, &cp)
	c.Abort()
}

// handle adapts a handler that returns an error.
func (s *Server) handle(fn func(c *gin.Context) error) gin.HandlerFunc {
	return func(c *gin.Context) {
		if err := fn(c); err != nil {
			s.fail(c, err)
		}
	}
}
