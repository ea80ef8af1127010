// Package httpapi exposes billing over HTTP: the apiserver mounts Service on its authenticated
// /v1 group, and every handler reads the caller from authn.FromContext.
//
//	POST /v1/agent/usage            daemon           ingest a usage batch
//	GET  /v1/usage                  tenant, platform own usage (platform: ?tenant_id=)
//	GET  /v1/invoices               tenant, platform own invoices (platform: all or ?tenant_id=)
//	GET  /v1/invoices/{id}          tenant, platform one invoice with lines
//	GET  /v1/prices                 tenant, platform the price book
//	POST /v1/prices                 finance          add a price entry
//	GET  /v1/periods                tenant, platform months with usage or an invoice, open or closed
//	POST /v1/periods/close          finance          close a tenant's month into an invoice
//	GET  /v1/reports/gpu-hours      finance, operator utilised GPU-hours (sessions), JSON or CSV
//	GET  /v1/reports/billing        finance, operator held vs utilised hours, storage, revenue; JSON or CSV
package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"gpucloud/billing/ingest"
	"gpucloud/billing/invoice"
	"gpucloud/billing/rating"
	"gpucloud/billing/report"
	"gpucloud/internal/authn"
	"gpucloud/internal/problem"
)

// Service holds billing's HTTP handlers.
type Service struct {
	ingest   *ingest.Ingester
	prices   *rating.Book
	invoices *invoice.Service
	reports  *report.Reporter
	now      func() time.Time
	log      *slog.Logger
}

// New builds the service on pool (a database migrated with gpucloud/migrations).
func New(pool *pgxpool.Pool, log *slog.Logger) *Service {
	if log == nil {
		log = slog.Default()
	}
	return &Service{
		ingest:   ingest.New(pool, log),
		prices:   rating.NewBook(pool),
		invoices: invoice.New(pool),
		reports:  report.New(pool),
		now:      time.Now,
		log:      log,
	}
}

// SetClock replaces the clock used for "is this in the future / has this month ended" (tests).
func (s *Service) SetClock(now func() time.Time) {
	s.now = now
	s.ingest.SetClock(now)
	s.invoices.SetClock(now)
}

// RunRollups moves ingested usage into the hourly rollups every second until ctx ends; the
// apiserver starts it once per replica (replicas take turns through an advisory lock). Reports
// and period closes flush on their own too, so a stopped loop only makes them slower.
func (s *Service) RunRollups(ctx context.Context) { s.ingest.RunRollups(ctx, time.Second) }

// Mount registers the routes on g, the apiserver's authenticated /v1 group.
func (s *Service) Mount(g *gin.RouterGroup) {
	g.POST("/agent/usage", s.allow(authn.RoleDaemon), s.postUsage)
	g.GET("/usage", s.allow(tenantRoles...), s.getUsage)
	g.GET("/invoices", s.allow(tenantRoles...), s.listInvoices)
	g.GET("/invoices/:id", s.allow(tenantRoles...), s.getInvoice)
	g.GET("/prices", s.allow(tenantRoles...), s.listPrices)
	g.POST("/prices", s.allow(authn.RoleFinance), s.addPrice)
	g.GET("/periods", s.allow(tenantRoles...), s.listPeriods)
	g.POST("/periods/close", s.allow(authn.RoleFinance), s.closePeriod)
	g.GET("/reports/gpu-hours", s.allow(authn.RoleFinance, authn.RoleOperator), s.gpuHours)
	g.GET("/reports/billing", s.allow(authn.RoleFinance, authn.RoleOperator), s.heldReport)
}

// tenantRoles may read tenant-scoped resources: tenants their own, platform roles any.
var tenantRoles = []authn.Role{authn.RoleTenantAdmin, authn.RoleTenantMember, authn.RoleOperator, authn.RoleFinance}

// allow refuses callers without one of roles. Tenant roles must carry a tenant.
func (s *Service) allow(roles ...authn.Role) gin.HandlerFunc {
	return func(c *gin.Context) {
		p, ok := authn.FromContext(c.Request.Context())
		if !ok {
			fail(c, problem.New(http.StatusUnauthorized, "unauthenticated", "Authentication required", ""))
			return
		}
		for _, r := range roles {
			if p.Role == r {
				if (r == authn.RoleTenantAdmin || r == authn.RoleTenantMember) && p.TenantID == uuid.Nil {
					break
				}
				c.Set("billing.principal", p)
				c.Next()
				return
			}
		}
		fail(c, problem.New(http.StatusForbidden, "forbidden", "Not allowed",
			"role "+string(p.Role)+" may not "+c.Request.Method+" "+c.FullPath()))
	}
}

func principal(c *gin.Context) authn.Principal {
	p, _ := c.MustGet("billing.principal").(authn.Principal)
	return p
}

// scope is the tenant a request may see: its own for tenant roles, the optional tenant_id
// parameter for platform roles (nil: all tenants).
func scope(c *gin.Context) (*uuid.UUID, *problem.Details) {
	p := principal(c)
	q := c.Query("tenant_id")
	if !p.IsPlatform() {
		if q != "" && q != p.TenantID.String() {
			// Asking for someone else's tenant looks the same as asking for a missing one.
			return nil, problem.New(http.StatusNotFound, "not-found", "Not found", "no such tenant")
		}
		t := p.TenantID
		return &t, nil
	}
	if q == "" {
		return nil, nil
	}
	t, err := uuid.Parse(q)
	if err != nil {
		return nil, problem.Validation(problem.FieldError{Field: "tenant_id", Reason: "is not a uuid"})
	}
	return &t, nil
}

func fail(c *gin.Context, d *problem.Details) {
	d.Instance = c.Request.URL.Path
	problem.Write(c.Writer, d)
	c.Abort()
}

func internal(c *gin.Context, log *slog.Logger, err error) {
	log.ErrorContext(c.Request.Context(), "billing request failed", "path", c.Request.URL.Path, "err", err)
	fail(c, problem.New(http.StatusInternalServerError, "internal", "Internal error", ""))
}
