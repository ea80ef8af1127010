package reconcile

import (
	"context"
	"fmt"
	"time"

	"gpucloud/api"
)

// usageQueue holds VM usage records not yet accepted by the apiserver. VM time is metered in
// fixed windows: an instance seen running during a pass is billed the whole window that pass
// falls in, under the id "<host>/<instance>/<window start unix>". A window is thus billed once
// however many passes (or hostd restarts) see it, because billing ingests each id once.
type usageQueue struct {
	spool   *spool // pending, on disk (spool.go)
	pending []api.UsageRecord
	sent    map[string]time.Time // record id -> window start, to skip windows already queued
}

func (r *Reconciler) noteRunning(d api.DesiredInstance) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.hostID == "" {
		return
	}
	w := r.cfg.UsageWindow
	start := r.cfg.Now().UTC().Truncate(w)
	id := fmt.Sprintf("%s/%s/%d", r.hostID, d.ID, start.Unix())
	if r.usage.sent == nil {
		r.usage.sent = map[string]time.Time{}
	}
	if _, done := r.usage.sent[id]; done {
		return
	}
	r.usage.sent[id] = start
	rec := api.UsageRecord{
		ID: id, Kind: api.UsageVM, Source: r.hostID, TenantID: d.TenantID, InstanceID: d.ID,
		Start: start, End: start.Add(w), InstanceType: d.InstanceType, VCPUs: d.Spec.VCPUs, MemoryMiB: d.Spec.MemoryMiB,
	}
	if err := r.usage.spool.add(rec); err != nil {
		// Still queued in memory: it is sent unless this hostd dies first.
		r.log.Error("usage record not spooled to disk", "id", id, "err", err)
	}
	r.usage.pending = append(r.usage.pending, rec)
	for k, t := range r.usage.sent {
		if start.Sub(t) > 2*w {
			delete(r.usage.sent, k)
		}
	}
}

// flushUsage pushes queued records in batches of up to 1,000. Records the apiserver rejects
// are logged and dropped (resending cannot fix them); on a transport error they stay queued.
func (r *Reconciler) flushUsage(ctx context.Context) error {
	for {
		r.mu.Lock()
		n := min(len(r.usage.pending), 1000)
		batch := append([]api.UsageRecord(nil), r.usage.pending[:n]...)
		r.mu.Unlock()
		if n == 0 {
			return nil
		}
		res, err := r.cfg.ControlPlane.PushUsage(ctx, api.UsageBatch{Records: batch})
		if err != nil {
			return fmt.Errorf("push usage: %w", err)
		}
		for _, rej := range res.Rejected {
			r.log.Error("usage record rejected", "id", rej.ID, "reason", rej.Reason)
		}
		r.mu.Lock()
		r.usage.pending = r.usage.pending[n:]
		err = r.usage.spool.compact(r.usage.pending)
		r.mu.Unlock()
		if err != nil {
			return err // the acknowledged records stay spooled and are sent again: harmless
		}
	}
}
