package httpapi

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"gpucloud/billing/webhook"
	"gpucloud/internal/authn"
	"gpucloud/internal/problem"
)

type webhookRequest struct {
	URL    string   `json:"url"`
	Events []string `json:"events"`
	// TenantID: finance only; empty registers a finance endpoint for every tenant's events.
	TenantID string `json:"tenant_id"`
}

// createWebhook registers an endpoint: a tenant admin's for its own tenant's events, finance's
// for one tenant or (no tenant_id) every tenant. The secret is in this answer only. Finance's
// endpoints are finance's: the tenant they report on neither sees nor deletes them.
func (s *Service) createWebhook(c *gin.Context) {
	var req webhookRequest
	if d := decodeStrict(c, &req); d != nil {
		fail(c, d)
		return
	}
	p := principal(c)
	var tenant *uuid.UUID
	create := s.hooks.CreateForFinance // finance's endpoint, one tenant's events or all
	switch {
	case p.Role == authn.RoleTenantAdmin:
		if req.TenantID != "" && req.TenantID != p.TenantID.String() {
			fail(c, problem.Validation(problem.FieldError{Field: "tenant_id", Reason: "a tenant registers endpoints for itself only"}))
			return
		}
		t := p.TenantID
		tenant = &t
		create = s.hooks.Create // the tenant's own
	case req.TenantID != "":
		t, err := uuid.Parse(req.TenantID)
		if err != nil || t == uuid.Nil {
			fail(c, problem.Validation(problem.FieldError{Field: "tenant_id", Reason: "is not a tenant uuid"}))
			return
		}
		tenant = &t
	}
	ep, err := create(c.Request.Context(), tenant, req.URL, req.Events)
	s.answer(c, http.StatusCreated, ep, err)
}

func (s *Service) listWebhooks(c *gin.Context) {
	tenant, d := scope(c)
	if d != nil {
		fail(c, d)
		return
	}
	eps, err := s.hooks.List(c.Request.Context(), tenant)
	writeItems(c, s.log, eps, err)
}

// webhookID reads the :id of a webhook route.
func webhookID(c *gin.Context) (uuid.UUID, *problem.Details) {
	id, err := uuid.Parse(c.Param("id"))
	if err != nil {
		return id, problem.Validation(problem.FieldError{Field: "id", Reason: "is not a uuid"})
	}
	return id, nil
}

func (s *Service) deleteWebhook(c *gin.Context) {
	tenant, d := scope(c)
	if d == nil {
		var id uuid.UUID
		if id, d = webhookID(c); d == nil {
			err := s.hooks.Delete(c.Request.Context(), tenant, id)
			switch {
			case errors.Is(err, webhook.ErrNotFound):
				d = problem.New(http.StatusNotFound, "not-found", "Webhook not found", "")
			case err != nil:
				internal(c, s.log, err)
				return
			default:
				c.Status(http.StatusNoContent)
				return
			}
		}
	}
	fail(c, d)
}

// listDeliveries answers an endpoint's delivery log, newest first; cursor is the last id seen.
func (s *Service) listDeliveries(c *gin.Context) {
	tenant, limit, d := scopeAndLimit(c)
	if d != nil {
		fail(c, d)
		return
	}
	id, d := webhookID(c)
	if d != nil {
		fail(c, d)
		return
	}
	var before int64
	if v := c.Query("cursor"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			fail(c, problem.Validation(problem.FieldError{Field: "cursor", Reason: "is not a cursor from a previous page"}))
			return
		}
		before = n
	}
	if limit == 0 {
		limit = 100
	}
	ds, err := s.hooks.Deliveries(c.Request.Context(), tenant, id, before, limit)
	if errors.Is(err, webhook.ErrNotFound) {
		fail(c, problem.New(http.StatusNotFound, "not-found", "Webhook not found", ""))
		return
	}
	if err != nil {
		internal(c, s.log, err)
		return
	}
	out := gin.H{"items": ds}
	if ds == nil {
		out["items"] = []webhook.Delivery{}
	}
	if len(ds) == limit {
		out["next_cursor"] = strconv.FormatInt(ds[len(ds)-1].ID, 10)
	}
	c.JSON(http.StatusOK, out)
}
