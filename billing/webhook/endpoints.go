package webhook

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Endpoint is a registered receiver. Secret is returned only when it is created.
type Endpoint struct {
	ID        uuid.UUID  `json:"id"`
	TenantID  *uuid.UUID `json:"tenant_id"` // nil: every tenant's events
	Owner     string     `json:"owner"`     // OwnerTenant or OwnerFinance
	URL       string     `json:"url"`
	Events    []string   `json:"events"`
	Secret    string     `json:"secret,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
}

// Delivery is one entry of the delivery log.
type Delivery struct {
	ID            int64      `json:"id"`
	WebhookID     uuid.UUID  `json:"webhook_id"`
	EventID       uuid.UUID  `json:"event_id"`
	EventType     string     `json:"event_type"`
	Status        string     `json:"status"` // pending, delivered, failed
	Attempts      int        `json:"attempts"`
	NextAttemptAt time.Time  `json:"next_attempt_at"`
	LastStatus    int        `json:"last_status"`
	LastError     string     `json:"last_error,omitempty"`
	CreatedAt     time.Time  `json:"created_at"`
	DeliveredAt   *time.Time `json:"delivered_at,omitempty"`
}

// FieldError names the field an endpoint was refused for.
type FieldError struct{ Field, Reason string }

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// ErrNotFound is an endpoint that does not exist or that the caller may not see.
var ErrNotFound = errors.New("webhook not found")

// Store keeps endpoints and reads the delivery log.
type Store struct{ pool *pgxpool.Pool }

// NewStore returns the endpoint store on pool.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// Owners of an endpoint: a tenant's own endpoint is visible to and deletable by the tenant;
// finance's (for every tenant, or for one tenant's events) only by finance.
const (
	OwnerTenant  = "tenant"
	OwnerFinance = "finance"
)

// Create registers an endpoint with a new random secret: the tenant's own for its events, or,
// with tenant nil, finance's for every tenant's.
func (s *Store) Create(ctx context.Context, tenant *uuid.UUID, rawURL string, events []string) (Endpoint, error) {
	owner := OwnerTenant
	if tenant == nil {
		owner = OwnerFinance
	}
	return s.create(ctx, owner, tenant, rawURL, events)
}

// CreateForFinance registers finance's endpoint for one tenant's events (every tenant's with
// tenant nil): the tenant does not see it.
func (s *Store) CreateForFinance(ctx context.Context, tenant *uuid.UUID, rawURL string, events []string) (Endpoint, error) {
	return s.create(ctx, OwnerFinance, tenant, rawURL, events)
}

func (s *Store) create(ctx context.Context, owner string, tenant *uuid.UUID, rawURL string, events []string) (Endpoint, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || len(rawURL) > 2048 || u.User != nil {
		return Endpoint{}, &FieldError{"url", "must be an http or https URL without credentials (at most 2048 bytes)"}
	}
	if len(events) == 0 || len(events) > len(Events) {
		return Endpoint{}, &FieldError{"events", fmt.Sprintf("must list 1..%d of %v", len(Events), Events)}
	}
	seen := map[string]bool{}
	for _, e := range events {
		if !ValidEvent(e) || seen[e] {
			return Endpoint{}, &FieldError{"events", fmt.Sprintf("%q is not one of %v (each once)", e, Events)}
		}
		seen[e] = true
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return Endpoint{}, fmt.Errorf("webhook: secret: %w", err)
	}
	ep := Endpoint{TenantID: tenant, Owner: owner, URL: rawURL, Events: events, Secret: "whsec_" + hex.EncodeToString(b)}
	if err := s.pool.QueryRow(ctx, `INSERT INTO billing_webhooks (tenant_id, owner, url, secret, events) VALUES ($1, $2, $3, $4, $5)
		RETURNING id, created_at`, tenant, owner, rawURL, ep.Secret, events).Scan(&ep.ID, &ep.CreatedAt); err != nil {
		return Endpoint{}, fmt.Errorf("webhook: create: %w", err)
	}
	ep.CreatedAt = ep.CreatedAt.UTC()
	return ep, nil
}

// ownedBy is the condition for a caller scoped to tenant (nil: finance, all): a tenant has only
// its own endpoints, not finance's for it.
const ownedBy = `($1::uuid IS NULL OR (tenant_id = $1 AND owner = 'tenant'))`

// visible is ownedBy, live endpoints only.
const visible = `deleted_at IS NULL AND ` + ownedBy

// List returns the live endpoints the scope sees (secrets left out).
func (s *Store) List(ctx context.Context, tenant *uuid.UUID) ([]Endpoint, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, tenant_id, owner, url, events, created_at FROM billing_webhooks
		WHERE `+visible+` ORDER BY created_at, id`, tenant)
	if err != nil {
		return nil, fmt.Errorf("webhook: list: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Endpoint, error) {
		var e Endpoint
		err := r.Scan(&e.ID, &e.TenantID, &e.Owner, &e.URL, &e.Events, &e.CreatedAt)
		e.CreatedAt = e.CreatedAt.UTC()
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("webhook: list: %w", err)
	}
	return out, nil
}

// Delete stops deliveries to an endpoint (its log stays).
func (s *Store) Delete(ctx context.Context, tenant *uuid.UUID, id uuid.UUID) error {
	tag, err := s.pool.Exec(ctx, `UPDATE billing_webhooks SET deleted_at = now() WHERE `+visible+` AND id = $2`, tenant, id)
	if err != nil {
		return fmt.Errorf("webhook: delete: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	_, err = s.pool.Exec(ctx, `UPDATE billing_webhook_deliveries SET status = 'failed', last_error = 'endpoint deleted'
		WHERE webhook_id = $1 AND status = 'pending'`, id)
	if err != nil {
		return fmt.Errorf("webhook: delete: %w", err)
	}
	return nil
}

// Deliveries returns an endpoint's delivery log, newest first, before the id before (0: from
// the newest), at most limit.
func (s *Store) Deliveries(ctx context.Context, tenant *uuid.UUID, id uuid.UUID, before int64, limit int) ([]Delivery, error) {
	var ok bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM billing_webhooks WHERE `+ownedBy+` AND id = $2)`,
		tenant, id).Scan(&ok); err != nil {
		return nil, fmt.Errorf("webhook: deliveries: %w", err)
	}
	if !ok {
		return nil, ErrNotFound
	}
	rows, err := s.pool.Query(ctx, `SELECT id, webhook_id, event_id, event_type, status, attempts, next_attempt_at,
		last_status, last_error, created_at, delivered_at FROM billing_webhook_deliveries
		WHERE webhook_id = $1 AND ($2 = 0 OR id < $2) ORDER BY id DESC LIMIT $3`, id, before, limit)
	if err != nil {
		return nil, fmt.Errorf("webhook: deliveries: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Delivery, error) {
		var d Delivery
		err := r.Scan(&d.ID, &d.WebhookID, &d.EventID, &d.EventType, &d.Status, &d.Attempts, &d.NextAttemptAt,
			&d.LastStatus, &d.LastError, &d.CreatedAt, &d.DeliveredAt)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("webhook: deliveries: %w", err)
	}
	return out, nil
}
