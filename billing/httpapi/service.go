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
//	POST /v1/periods/close-all      finance          close a month for every tenant (a durable, resumable job)
//	GET  /v1/periods/close-jobs/{id} finance, operator the job's progress
//	GET  /v1/reports/gpu-hours      finance, operator utilised GPU-hours (sessions), JSON or CSV
//	GET  /v1/reports/billing        finance, operator held vs utilised hours, storage, revenue; JSON or CSV
//	GET  /v1/balance                tenant, platform  running balance (credit left - unbilled charges), budget
//	GET  /v1/credits                tenant, platform  credit grants
//	POST /v1/credits                finance          grant prepaid credit
//	GET  /v1/budget                 tenant, platform  the tenant's budget
//	PUT  /v1/budget                 tenant admin, finance set the budget (thresholds, hard stop)
//	POST /v1/webhooks               tenant admin, finance register an endpoint (secret in the answer only)
//	GET  /v1/webhooks               tenant, platform  endpoints
//	DELETE /v1/webhooks/{id}        tenant admin, finance stop an endpoint
//	GET  /v1/webhooks/{id}/deliveries tenant, platform the delivery log
package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"gpucloud/api"
	"gpucloud/billing/credit"
	"gpucloud/billing/ingest"
	"gpucloud/billing/invoice"
	"gpucloud/billing/rating"
	"gpucloud/billing/report"
	"gpucloud/billing/webhook"
	"gpucloud/internal/authn"
	"gpucloud/internal/problem"
)

// ControlPlane is what billing asks the control plane, which owns tenants and placements.
type ControlPlane interface {
	// AuthorizeUsage checks usage records against placements: a daemon may bill only instances
	// placed on it, for their own tenant and size. It returns one reason per record, "" for
	// allowed, each starting with the field that is wrong.
	AuthorizeUsage(ctx context.Context, daemon authn.Principal, recs []api.UsageRecord) ([]string, error)
	// TenantExists reports whether a tenant of that id exists (deleted or not: its usage is
	// still billed).
	TenantExists(ctx context.Context, id uuid.UUID) (bool, error)
}

// Service holds billing's HTTP handlers.
type Service struct {
	cp       ControlPlane
	ingest   *ingest.Ingester
	prices   *rating.Book
	invoices *invoice.Service
	reports  *report.Reporter
	credits  *credit.Service
	hooks    *webhook.Store
	now      func() time.Time
	log      *slog.Logger
}

// New builds the service on pool (a database migrated with gpucloud/migrations); cp answers
// which tenants exist and which daemon may bill which instance.
func New(pool *pgxpool.Pool, cp ControlPlane, log *slog.Logger) *Service {
	if log == nil {
		log = slog.Default()
	}
	return &Service{
		cp:       cp,
		ingest:   ingest.New(pool, log),
		prices:   rating.NewBook(pool),
		invoices: invoice.New(pool),
		reports:  report.New(pool),
		credits:  credit.New(pool),
		hooks:    webhook.NewStore(pool),
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

// RunCloseJobs works the jobs that close a month for every tenant until ctx ends: each replica
// runs one; a job belongs to one replica at a time (a lease), and is taken over if it dies.
func (s *Service) RunCloseJobs(ctx context.Context) {
	invoice.NewJobRunner(s.invoices, s.log).Run(ctx, time.Second)
}

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
	g.POST("/periods/close-all", s.allow(authn.RoleFinance), s.closeAll)
	g.GET("/periods/close-jobs/:id", s.allow(authn.RoleFinance, authn.RoleOperator), s.getCloseJob)
	g.GET("/reports/gpu-hours", s.allow(authn.RoleFinance, authn.RoleOperator), s.gpuHours)
	g.GET("/reports/billing", s.allow(authn.RoleFinance, authn.RoleOperator), s.heldReport)
	g.GET("/balance", s.allow(tenantRoles...), s.getBalance)
	g.GET("/credits", s.allow(tenantRoles...), s.listCredits)
	g.POST("/credits", s.allow(authn.RoleFinance), s.addCredit)
	g.GET("/budget", s.allow(tenantRoles...), s.getBudget)
	g.PUT("/budget", s.allow(authn.RoleTenantAdmin, authn.RoleFinance), s.putBudget)
	g.POST("/webhooks", s.allow(authn.RoleTenantAdmin, authn.RoleFinance), s.createWebhook)
	g.GET("/webhooks", s.allow(tenantRoles...), s.listWebhooks)
	g.DELETE("/webhooks/:id", s.allow(authn.RoleTenantAdmin, authn.RoleFinance), s.deleteWebhook)
	g.GET("/webhooks/:id/deliveries", s.allow(tenantRoles...), s.listDeliveries)
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

// answer writes v with status, or the error: a field error as a 400 naming the field, any other
// as a 500.
func (s *Service) answer(c *gin.Context, status int, v any, err error) {
	if d := fieldProblem(err); d != nil {
		fail(c, d)
		return
	}
	if err != nil {
		internal(c, s.log, err)
		return
	}
	c.JSON(status, v)
}

func internal(c *gin.Context, log *slog.Logger, err error) {
	log.ErrorContext(c.Request.Context(), "billing request failed", "path", c.Request.URL.Path, "err", err)
	fail(c, problem.New(http.StatusInternalServerError, "internal", "Internal error", ""))
}
