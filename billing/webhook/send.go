package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Dispatcher sends queued deliveries. Several may run (one per replica): each locks the rows it
// sends, so a delivery is attempted by one at a time.
type Dispatcher struct {
	pool *pgxpool.Pool
	http *http.Client
	log  *slog.Logger
	now  func() time.Time
	// Backoff is the wait after the first failed attempt, doubled after each next one up to
	// MaxBackoff; after MaxAttempts the delivery is marked failed.
	Backoff, MaxBackoff time.Duration
	MaxAttempts         int
	Batch               int
}

// Options configure a dispatcher.
type Options struct {
	// AllowPrivate lets deliveries reach loopback and private addresses (the local stack, tests).
	// Off in service: a tenant's endpoint must not make the platform call its own network.
	AllowPrivate bool
	Timeout      time.Duration
}

// NewDispatcher returns a dispatcher on pool.
func NewDispatcher(pool *pgxpool.Pool, log *slog.Logger, o Options) *Dispatcher {
	if log == nil {
		log = slog.Default()
	}
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Second
	}
	dialer := &net.Dialer{Timeout: o.Timeout}
	if !o.AllowPrivate {
		dialer.Control = refusePrivate
	}
	tr := &http.Transport{DialContext: dialer.DialContext, Proxy: nil, MaxIdleConnsPerHost: 4}
	return &Dispatcher{
		pool: pool, log: log, now: time.Now,
		http: &http.Client{Transport: tr, Timeout: o.Timeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		Backoff: 5 * time.Second, MaxBackoff: time.Hour, MaxAttempts: 15, Batch: 16,
	}
}

// refusePrivate refuses connections to loopback, private, link-local and unspecified addresses,
// checked on the address actually dialled (after DNS), so a name cannot point around it.
func refusePrivate(_, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	ip := net.ParseIP(host)
	if ip == nil || ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsUnspecified() || ip.IsMulticast() {
		return fmt.Errorf("webhook: refusing to deliver to %s (not a public address)", host)
	}
	return nil
}

type due struct {
	id                     int64
	url, secret, eventType string
	payload                []byte
	attempts               int
}

// RunOnce sends the deliveries due now (at most Batch) and returns how many it attempted.
func (d *Dispatcher) RunOnce(ctx context.Context) (int, error) {
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("webhook: begin: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after commit
	rows, err := tx.Query(ctx, `SELECT d.id, w.url, w.secret, d.event_type, d.payload::text, d.attempts
		FROM billing_webhook_deliveries d JOIN billing_webhooks w ON w.id = d.webhook_id
		WHERE d.status = 'pending' AND d.next_attempt_at <= $1
		ORDER BY d.next_attempt_at, d.id LIMIT $2 FOR UPDATE OF d SKIP LOCKED`, d.now(), d.Batch)
	if err != nil {
		return 0, fmt.Errorf("webhook: claim: %w", err)
	}
	var batch []due
	for rows.Next() {
		var x due
		var payload string
		if err := rows.Scan(&x.id, &x.url, &x.secret, &x.eventType, &payload, &x.attempts); err != nil {
			rows.Close()
			return 0, fmt.Errorf("webhook: claim: %w", err)
		}
		x.payload = []byte(payload)
		batch = append(batch, x)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("webhook: claim: %w", err)
	}
	for _, x := range batch {
		status, sendErr := d.send(ctx, x)
		attempts := x.attempts + 1
		switch {
		case sendErr == nil:
			_, err = tx.Exec(ctx, `UPDATE billing_webhook_deliveries SET status = 'delivered', attempts = $2, last_status = $3,
				last_error = '', delivered_at = $4 WHERE id = $1`, x.id, attempts, status, d.now())
		case attempts >= d.MaxAttempts:
			_, err = tx.Exec(ctx, `UPDATE billing_webhook_deliveries SET status = 'failed', attempts = $2, last_status = $3,
				last_error = $4 WHERE id = $1`, x.id, attempts, status, sendErr.Error())
		default:
			_, err = tx.Exec(ctx, `UPDATE billing_webhook_deliveries SET attempts = $2, last_status = $3, last_error = $4,
				next_attempt_at = $5 WHERE id = $1`, x.id, attempts, status, sendErr.Error(), d.now().Add(d.backoff(attempts)))
		}
		if err != nil {
			return 0, fmt.Errorf("webhook: record delivery %d: %w", x.id, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("webhook: commit: %w", err)
	}
	return len(batch), nil
}

// backoff is the wait after the attempts-th failure.
func (d *Dispatcher) backoff(attempts int) time.Duration {
	b := d.Backoff
	for i := 1; i < attempts && b < d.MaxBackoff; i++ {
		b *= 2
	}
	return min(b, d.MaxBackoff)
}

// send posts one delivery; a 2xx answer is delivered.
func (d *Dispatcher) send(ctx context.Context, x due) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, x.url, bytes.NewReader(x.payload))
	if err != nil {
		return 0, fmt.Errorf("request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "gpucloud-webhooks/1")
	req.Header.Set(EventHeader, x.eventType)
	req.Header.Set(DeliveryHeader, fmt.Sprint(x.id))
	req.Header.Set(SignatureHeader, Sign(x.secret, d.now(), x.payload))
	resp, err := d.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, fmt.Errorf("receiver answered %s", resp.Status)
	}
	return resp.StatusCode, nil
}

// Run sends due deliveries every interval until ctx ends.
func (d *Dispatcher) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		n, err := d.RunOnce(ctx)
		if err != nil && !errors.Is(err, context.Canceled) && ctx.Err() == nil {
			d.log.Error("webhook deliveries failed", "err", err)
		}
		if n > 0 {
			continue // more may be due
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
