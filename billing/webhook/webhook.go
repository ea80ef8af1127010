// Package webhook delivers billing and instance events to tenants' and finance's HTTP endpoints
// from a durable PostgreSQL queue: an event is enqueued in the transaction of the change it
// reports (so it exists exactly when the change does), and sent, signed, by whichever replica
// locks it first (FOR UPDATE SKIP LOCKED), retried with exponential backoff until delivered or
// given up; every attempt's outcome stays in the delivery log.
//
// Signature: header Gpucloud-Signature is "t=<unix seconds>,v1=<hex HMAC-SHA256>", the HMAC
// keyed by the endpoint's secret over "<t>.<body>". Receivers recompute it and refuse a t far
// from their clock (replays). Gpucloud-Event names the event type, Gpucloud-Delivery the
// delivery id (the same on every retry: receivers deduplicate on it).
package webhook

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
)

// Event types.
const (
	BudgetThreshold = "budget.threshold"
	CreditLow       = "credit.low"
	InvoiceClosed   = "invoice.closed"
	InstanceFailed  = "instance.failed"
	InstanceState   = "instance.state"
)

// Events lists every event type an endpoint may subscribe to.
var Events = []string{BudgetThreshold, CreditLow, InvoiceClosed, InstanceFailed, InstanceState}

// ValidEvent reports whether e is an event type.
func ValidEvent(e string) bool { return slices.Contains(Events, e) }

// Header names.
const (
	SignatureHeader = "Gpucloud-Signature"
	EventHeader     = "Gpucloud-Event"
	DeliveryHeader  = "Gpucloud-Delivery"
)

// Sign returns the signature header's value for body sent at t with secret.
func Sign(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + mac(secret, ts, body)
}

func mac(secret, ts string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts + "."))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// Verify checks a signature header against body and secret, refusing one older or newer than
// tolerance at now. Receivers (and tests) use it.
func Verify(secret, header string, body []byte, now time.Time, tolerance time.Duration) error {
	var ts, sig string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sig = v
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || sig == "" {
		return fmt.Errorf("webhook: malformed signature header %q", header)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("webhook: signature time %s is %s from now", time.Unix(sec, 0).UTC(), d)
	}
	if !hmac.Equal([]byte(sig), []byte(mac(secret, ts, body))) {
		return fmt.Errorf("webhook: signature does not match")
	}
	return nil
}

// Execer is a transaction.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Envelope is what a receiver gets: the event and its data.
type Envelope struct {
	ID       uuid.UUID `json:"id"`
	Type     string    `json:"type"`
	TenantID uuid.UUID `json:"tenant_id"`
	At       time.Time `json:"at"`
	Data     any       `json:"data"`
}

// Enqueue queues event typ about tenant for every live endpoint subscribed to it: the tenant's
// own and finance's (tenant-less) ones. Call it in the transaction of the change it reports.
func Enqueue(ctx context.Context, tx Execer, tenant uuid.UUID, typ string, at time.Time, data any) error {
	env := Envelope{ID: uuid.New(), Type: typ, TenantID: tenant, At: at.UTC(), Data: data}
	payload, err := json.Marshal(env)
	if err != nil {
		return fmt.Errorf("webhook: encode %s: %w", typ, err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO billing_webhook_deliveries (webhook_id, tenant_id, event_id, event_type, payload)
		SELECT w.id, $1, $2, $3, $4 FROM billing_webhooks w
		WHERE w.deleted_at IS NULL AND (w.tenant_id = $1 OR w.tenant_id IS NULL) AND $3 = ANY(w.events)`,
		tenant, env.ID, typ, payload); err != nil {
		return fmt.Errorf("webhook: enqueue %s: %w", typ, err)
	}
	return nil
}
