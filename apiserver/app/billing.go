package app

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"gpucloud/apiserver/openapi"
	"gpucloud/apiserver/server"
	"gpucloud/apiserver/store"
	"gpucloud/billing/credit"
	billinghttp "gpucloud/billing/httpapi"
	"gpucloud/billing/webhook"
	"gpucloud/internal/problem"
)

// NewServer builds the apiserver with every part the platform mounts into it (billing today) and
// starts their background work, which stops with ctx. The apiserver command, the local stack and
// the tests of other parts all build it here, so they serve the same routes.
func NewServer(ctx context.Context, opts server.Options, bc ...BillingConfig) (*server.Server, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	var cfg BillingConfig
	if len(bc) > 0 {
		cfg = bc[0]
	}
	runBilling, err := mountBilling(&opts, opts.Store, opts.Logger, cfg)
	if err != nil {
		return nil, err
	}
	srv, err := server.New(opts)
	if err != nil {
		return nil, err
	}
	go runBilling(ctx)
	return srv, nil
}

// BillingConfig are billing's settings in the apiserver.
type BillingConfig struct {
	// WebhooksAllowPrivate lets webhook deliveries reach loopback and private addresses (the
	// local stack, tests); off in service.
	WebhooksAllowPrivate bool
	// CheckInterval is how often budgets and credits are checked (default a minute).
	CheckInterval time.Duration
}

// mountBilling adds billing's routes and their documentation to opts, and returns the function
// that keeps billing's hourly rollups current while the server runs. Billing lives in the
// apiserver's process: it shares its database, its authentication and its /v1 namespace.
func mountBilling(opts *server.Options, st *store.Store, log *slog.Logger, cfg BillingConfig) (run func(context.Context), err error) {
	svc := billinghttp.New(st.Pool, st, log)
	paths, err := billingPaths()
	if err != nil {
		return nil, err
	}
	opts.Mounts = append(opts.Mounts, svc.Mount)
	opts.Paths = append(opts.Paths, paths)
	credits := credit.New(st.Pool)
	// The hard stop: no new instances while a tenant's prepaid credit is exhausted.
	opts.AdmitCreate = func(ctx context.Context, tenant uuid.UUID) *problem.Details {
		blocked, err := credits.Blocked(ctx, tenant, time.Now())
		if err != nil {
			log.ErrorContext(ctx, "credit check failed; create admitted", "tenant", tenant, "err", err)
			return nil
		}
		if blocked {
			return problem.New(http.StatusPaymentRequired, "credit-exhausted", "Prepaid credit exhausted",
				"the tenant's budget stops new instances while its credit is exhausted; ask finance for a credit grant")
		}
		return nil
	}
	ev := credit.NewEvaluator(credits, log)
	ev.Stop = func(ctx context.Context, tenant uuid.UUID) error { return stopTenantInstances(ctx, st, tenant) }
	hooks := webhook.NewDispatcher(st.Pool, log, webhook.Options{AllowPrivate: cfg.WebhooksAllowPrivate})
	interval := cfg.CheckInterval
	if interval == 0 {
		interval = time.Minute
	}
	return func(ctx context.Context) {
		go ev.Run(ctx, interval, time.Now)
		go hooks.Run(ctx, time.Second)
		go svc.RunCloseJobs(ctx)
		svc.RunRollups(ctx)
	}, nil
}

// stopTenantInstances stops every instance of tenant that runs or is starting (billing's hard
// stop); each stop is an ordinary tenant action, audited and metered like any other.
func stopTenantInstances(ctx context.Context, st *store.Store, tenant uuid.UUID) error {
	rows, err := st.Pool.Query(ctx, `SELECT id FROM instances WHERE tenant_id = $1 AND state IN ('pending', 'provisioning', 'running')`, tenant)
	if err != nil {
		return fmt.Errorf("hard stop: list instances: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return fmt.Errorf("hard stop: list instances: %w", err)
	}
	for _, id := range ids {
		if _, err := st.Act(ctx, tenant, id, "stop", "billing:credit-exhausted"); err != nil {
			return fmt.Errorf("hard stop: stop %s: %w", id, err)
		}
	}
	return nil
}

// billingPaths converts billing's untyped OpenAPI path items into the apiserver's document types.
// A round trip through JSON is the contract: both sides speak OpenAPI 3 JSON.
func billingPaths() (map[string]openapi.PathItem, error) {
	raw, err := json.Marshal(billinghttp.OpenAPIPaths())
	if err != nil {
		return nil, fmt.Errorf("billing openapi: encode: %w", err)
	}
	var paths map[string]openapi.PathItem
	if err := json.Unmarshal(raw, &paths); err != nil {
		return nil, fmt.Errorf("billing openapi: decode into the apiserver's document: %w", err)
	}
	return paths, nil
}
