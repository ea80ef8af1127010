package invoice

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"gpucloud/billing/rating"
)

// Job closes one month for every tenant with something to bill in it. Its row is durable: a
// replica that dies mid-job leaves it running with a lease that lapses, and another replica takes
// it over; tenants already closed are skipped, so no invoice is made twice (the database's unique
// (tenant, period) would refuse it anyway).
type Job struct {
	ID         uuid.UUID  `json:"id"`
	Period     string     `json:"period"`
	Status     string     `json:"status"` // running, done
	Closed     int        `json:"closed"`
	Skipped    int        `json:"skipped"` // already closed (by hand, or before a takeover)
	Failed     int        `json:"failed"`  // refused (e.g. unpriced usage): closed by a later job once fixed
	LastError  string     `json:"last_error,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// ErrJobNotFound is an unknown job id.
var ErrJobNotFound = errors.New("close job not found")

// StartCloseAll queues a job closing period for every tenant, or returns the one already
// running for it.
func (s *Service) StartCloseAll(ctx context.Context, period time.Time) (Job, error) {
	if end := period.AddDate(0, 1, 0); s.now().Before(end) {
		return Job{}, fmt.Errorf("%w: %s ends %s", ErrNotEnded, period.Format("2006-01"), end.Format(time.RFC3339))
	}
	var id uuid.UUID
	err := s.pool.QueryRow(ctx, `INSERT INTO billing_close_jobs (period) VALUES ($1)
		ON CONFLICT (period) WHERE status = 'running' DO NOTHING RETURNING id`, period).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		err = s.pool.QueryRow(ctx, `SELECT id FROM billing_close_jobs WHERE period = $1 AND status = 'running'`, period).Scan(&id)
	}
	if err != nil {
		return Job{}, fmt.Errorf("invoice: start close job: %w", err)
	}
	return s.GetJob(ctx, id)
}

// GetJob returns a job's progress.
func (s *Service) GetJob(ctx context.Context, id uuid.UUID) (Job, error) {
	var j Job
	var period time.Time
	err := s.pool.QueryRow(ctx, `SELECT id, period, status, closed, skipped, failed, last_error, created_at, finished_at
		FROM billing_close_jobs WHERE id = $1`, id).Scan(&j.ID, &period, &j.Status, &j.Closed, &j.Skipped, &j.Failed,
		&j.LastError, &j.CreatedAt, &j.FinishedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return j, ErrJobNotFound
	}
	if err != nil {
		return j, fmt.Errorf("invoice: close job: %w", err)
	}
	j.Period = period.Format("2006-01")
	return j, nil
}

// JobRunner runs close jobs.
type JobRunner struct {
	svc     *Service
	log     *slog.Logger
	Workers int           // tenants closed at once (default 4)
	Lease   time.Duration // how long a claim lasts without renewal (default 30 s)
	// AfterClose, when set, is called after each tenant's close (tests cut a job short here).
	AfterClose func()
}

// NewJobRunner returns a runner for svc's jobs.
func NewJobRunner(svc *Service, log *slog.Logger) *JobRunner {
	if log == nil {
		log = slog.Default()
	}
	return &JobRunner{svc: svc, log: log, Workers: 4, Lease: 30 * time.Second}
}

// RunOnce claims one job whose lease has lapsed and works it to the end (or until ctx ends);
// it reports whether there was one.
func (r *JobRunner) RunOnce(ctx context.Context) (bool, error) {
	var id uuid.UUID
	var period time.Time
	err := r.svc.pool.QueryRow(ctx, `UPDATE billing_close_jobs SET lease_until = now() + $1::interval
		WHERE id = (SELECT id FROM billing_close_jobs WHERE status = 'running' AND lease_until <= now()
		            ORDER BY created_at LIMIT 1 FOR UPDATE SKIP LOCKED)
		RETURNING id, period`, r.Lease.String()).Scan(&id, &period)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("invoice: claim close job: %w", err)
	}
	return true, r.work(ctx, id, period)
}

// work closes every tenant of the job's period that is still open.
func (r *JobRunner) work(ctx context.Context, id uuid.UUID, period time.Time) error {
	end := period.AddDate(0, 1, 0)
	// Tenants with usage booked in the month are listed in billing_usage_months (written with
	// the usage, so nothing needs flushing first); tenants that held something come from the
	// allocations.
	rows, err := r.svc.pool.Query(ctx, `
		SELECT t FROM (
		    SELECT tenant_id AS t FROM billing_usage_months WHERE booked_period = $1
		    UNION SELECT tenant_id FROM billing_allocations WHERE started_at < $2 AND (ended_at IS NULL OR ended_at > $1)
		) x WHERE NOT EXISTS (SELECT 1 FROM billing_invoices i WHERE i.tenant_id = x.t AND i.period = $1)
		ORDER BY t`, period, end)
	if err != nil {
		return fmt.Errorf("invoice: close job tenants: %w", err)
	}
	tenants, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return fmt.Errorf("invoice: close job tenants: %w", err)
	}
	var closed, skipped, failed atomic.Int64
	var mu sync.Mutex
	lastErr := ""
	next := make(chan uuid.UUID)
	var wg sync.WaitGroup
	for range max(r.Workers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t := range next {
				_, err := r.svc.Close(ctx, t, period)
				var unpriced *rating.UnpricedError
				switch {
				case err == nil:
					closed.Add(1)
				case errors.Is(err, ErrAlreadyClosed):
					skipped.Add(1)
				case ctx.Err() != nil:
					return
				default:
					failed.Add(1)
					mu.Lock()
					lastErr = fmt.Sprintf("tenant %s: %v", t, err)
					mu.Unlock()
					if !errors.As(err, &unpriced) {
						r.log.Error("close job: tenant not closed", "job", id, "tenant", t, "err", err)
					}
				}
				if r.AfterClose != nil {
					r.AfterClose()
				}
			}
		}()
	}
	progress := func(done bool) error {
		mu.Lock()
		le := lastErr
		mu.Unlock()
		// Counters add to what earlier runs of this job recorded; the lease is renewed.
		// At the end, closed and skipped are counted from the invoices themselves: a run killed
		// between two progress writes lost its counts, never its invoices.
		_, err := r.svc.pool.Exec(context.WithoutCancel(ctx), `UPDATE billing_close_jobs j SET
			closed = CASE WHEN $5 THEN (SELECT count(*) FROM billing_invoices i WHERE i.period = j.period AND i.status = 'closed'
			    AND i.closed_at >= j.created_at) ELSE closed + $2 END,
			skipped = CASE WHEN $5 THEN (SELECT count(*) FROM billing_invoices i WHERE i.period = j.period AND i.status = 'closed'
			    AND i.closed_at < j.created_at) ELSE skipped + $3 END,
			failed = CASE WHEN $5 THEN $4 ELSE failed END, last_error = CASE WHEN $6 <> '' THEN $6 ELSE last_error END,
			lease_until = now() + $7::interval,
			status = CASE WHEN $5 THEN 'done' ELSE status END, finished_at = CASE WHEN $5 THEN now() END
			WHERE id = $1`, id, closed.Swap(0), skipped.Swap(0), failed.Load(), done, le, r.Lease.String())
		return err
	}
	tick := time.NewTicker(max(r.Lease/3, time.Millisecond))
	defer tick.Stop()
feed:
	for _, t := range tenants {
		select {
		case next <- t:
		case <-tick.C:
			if err := progress(false); err != nil {
				break feed
			}
			next <- t
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err := progress(ctx.Err() == nil); err != nil {
		return fmt.Errorf("invoice: close job progress: %w", err)
	}
	return ctx.Err()
}

// Run works jobs every interval until ctx ends.
func (r *JobRunner) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, err := r.RunOnce(ctx); err != nil && ctx.Err() == nil {
			r.log.Error("close job failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
