package httpapi

import (
	"errors"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"gpucloud/billing/credit"
	"gpucloud/internal/authn"
	"gpucloud/internal/problem"
)

// scopedTenant is the one tenant a request is about: the caller's own for tenant roles, the
// required tenant_id parameter for platform roles.
func scopedTenant(c *gin.Context) (uuid.UUID, *problem.Details) {
	tenant, d := scope(c)
	if d != nil {
		return uuid.Nil, d
	}
	if tenant == nil {
		return uuid.Nil, problem.Validation(problem.FieldError{Field: "tenant_id", Reason: "is required for platform roles"})
	}
	return *tenant, nil
}

// getBalance answers a tenant's running balance: credit left minus what it held and has not yet
// been invoiced for.
func (s *Service) getBalance(c *gin.Context) {
	tenant, d := scopedTenant(c)
	if d != nil {
		fail(c, d)
		return
	}
	b, err := s.credits.Balance(c.Request.Context(), tenant, s.now())
	if err != nil {
		internal(c, s.log, err)
		return
	}
	resp := gin.H{"balance": b}
	if bud, err := s.credits.GetBudget(c.Request.Context(), tenant); err == nil {
		resp["budget"] = bud
	} else if !errors.Is(err, credit.ErrNoBudget) {
		internal(c, s.log, err)
		return
	}
	c.JSON(http.StatusOK, resp)
}

func (s *Service) listCredits(c *gin.Context) {
	tenant, d := scope(c)
	if d != nil {
		fail(c, d)
		return
	}
	gs, err := s.credits.Grants(c.Request.Context(), tenant)
	writeItems(c, s.log, gs, err)
}

type grantRequest struct {
	TenantID    string     `json:"tenant_id"`
	AmountCents int64      `json:"amount_cents"`
	Priority    *int       `json:"priority"`
	ExpiresAt   *time.Time `json:"expires_at"`
	Note        string     `json:"note"`
}

// addCredit grants prepaid credit to a tenant (finance).
func (s *Service) addCredit(c *gin.Context) {
	var req grantRequest
	if d := decodeStrict(c, &req); d != nil {
		fail(c, d)
		return
	}
	tenant, err := uuid.Parse(req.TenantID)
	if err != nil || tenant == uuid.Nil {
		fail(c, problem.Validation(problem.FieldError{Field: "tenant_id", Reason: "is not a tenant uuid"}))
		return
	}
	prio := 100
	if req.Priority != nil {
		prio = *req.Priority
	}
	g, err := s.credits.AddGrant(c.Request.Context(), credit.Grant{TenantID: tenant, AmountCents: req.AmountCents,
		Priority: prio, ExpiresAt: req.ExpiresAt, Note: req.Note}, s.now())
	if err == nil {
		s.log.InfoContext(c.Request.Context(), "credit granted", "tenant", tenant, "cents", g.AmountCents, "by", principal(c).UserID)
	}
	s.answer(c, http.StatusCreated, g, err)
}

func (s *Service) getBudget(c *gin.Context) {
	tenant, d := scopedTenant(c)
	if d != nil {
		fail(c, d)
		return
	}
	b, err := s.credits.GetBudget(c.Request.Context(), tenant)
	if errors.Is(err, credit.ErrNoBudget) {
		fail(c, problem.New(http.StatusNotFound, "not-found", "No budget", "no budget is set for this tenant"))
		return
	}
	if err != nil {
		internal(c, s.log, err)
		return
	}
	c.JSON(http.StatusOK, b)
}

type budgetRequest struct {
	LimitCents int64  `json:"limit_cents"`
	Thresholds []int  `json:"thresholds"`
	HardStop   string `json:"hard_stop"`
}

// putBudget sets a tenant's budget: a tenant admin its own, finance any (tenant_id parameter).
func (s *Service) putBudget(c *gin.Context) {
	if principal(c).Role == authn.RoleTenantMember {
		fail(c, problem.New(http.StatusForbidden, "forbidden", "Not allowed", "only a tenant admin or finance sets a budget"))
		return
	}
	tenant, d := scopedTenant(c)
	if d != nil {
		fail(c, d)
		return
	}
	var req budgetRequest
	if d := decodeStrict(c, &req); d != nil {
		fail(c, d)
		return
	}
	b, err := s.credits.SetBudget(c.Request.Context(), credit.Budget{TenantID: tenant, LimitCents: req.LimitCents,
		Thresholds: req.Thresholds, HardStop: req.HardStop})
	s.answer(c, http.StatusOK, b, err)
}
