package sdk

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// FieldError names one invalid input field.
type FieldError struct {
	Field  string `json:"field"`
	Reason string `json:"reason"`
}

// APIError is a failure the API answered with: its problem details (RFC 9457).
type APIError struct {
	Status    int          `json:"status"`
	Type      string       `json:"type"`
	Title     string       `json:"title"`
	Detail    string       `json:"detail,omitempty"`
	Instance  string       `json:"instance,omitempty"`
	RequestID string       `json:"request_id,omitempty"`
	Retryable bool         `json:"retryable,omitempty"`
	Fields    []FieldError `json:"fields,omitempty"`
	// Method and Path are the request that failed.
	Method string `json:"-"`
	Path   string `json:"-"`
}

func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s: %d", e.Method, e.Path, e.Status)
	if e.Type != "" {
		fmt.Fprintf(&b, " %s", e.Type)
	}
	switch {
	case len(e.Fields) > 1:
		for _, f := range e.Fields {
			fmt.Fprintf(&b, "; %s: %s", f.Field, f.Reason)
		}
	case e.Detail != "":
		fmt.Fprintf(&b, ": %s", e.Detail)
	case e.Title != "":
		fmt.Fprintf(&b, ": %s", e.Title)
	}
	return b.String()
}

// Sentinels for errors.Is: errors.Is(err, sdk.ErrNotFound) holds for any 404 APIError.
var (
	ErrUnauthenticated = errors.New("unauthenticated")
	ErrForbidden       = errors.New("forbidden")
	ErrNotFound        = errors.New("not found")
	ErrConflict        = errors.New("conflict")
	ErrValidation      = errors.New("invalid request")
	ErrUnavailable     = errors.New("unavailable")
)

// Is maps the status to a sentinel.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrUnauthenticated:
		return e.Status == http.StatusUnauthorized
	case ErrForbidden:
		return e.Status == http.StatusForbidden
	case ErrNotFound:
		return e.Status == http.StatusNotFound
	case ErrConflict:
		return e.Status == http.StatusConflict
	case ErrValidation:
		return e.Status == http.StatusBadRequest || e.Status == http.StatusUnprocessableEntity || e.Status == http.StatusRequestEntityTooLarge
	case ErrUnavailable:
		return e.retryable()
	}
	return false
}

func (e *APIError) retryable() bool {
	switch e.Status {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return e.Retryable
}

// AsAPIError returns the *APIError in err's chain.
func AsAPIError(err error) (*APIError, bool) {
	var e *APIError
	ok := errors.As(err, &e)
	return e, ok
}

// IsNotFound reports a 404.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// IsUnauthenticated reports a 401 (missing, unknown or revoked key).
func IsUnauthenticated(err error) bool { return errors.Is(err, ErrUnauthenticated) }

// IsForbidden reports a 403 (the role may not, or a quota is exceeded).
func IsForbidden(err error) bool { return errors.Is(err, ErrForbidden) }

// IsConflict reports a 409 (wrong state, in use, already exists).
func IsConflict(err error) bool { return errors.Is(err, ErrConflict) }

// IsValidation reports a 400/413/422 (bad input; the APIError's Fields name what).
func IsValidation(err error) bool { return errors.Is(err, ErrValidation) }

// IsRetryable reports a failure worth trying again later (429, 502-504, retryable problems,
// network errors that were retried until the attempts ran out).
func IsRetryable(err error) bool {
	if errors.Is(err, ErrUnavailable) {
		return true
	}
	var ne *NetworkError
	return errors.As(err, &ne)
}

// NetworkError is a request that got no HTTP answer.
type NetworkError struct {
	Method, Path string
	Err          error
}

func (e *NetworkError) Error() string { return fmt.Sprintf("%s %s: %v", e.Method, e.Path, e.Err) }
func (e *NetworkError) Unwrap() error { return e.Err }
