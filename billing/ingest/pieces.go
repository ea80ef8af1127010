package ingest

import (
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"gpucloud/api"
)

// pieceKey is a pending rollup row's key before booking: the record's own month stands where
// the booked period and adjustment flag go; SQL joins it to the booking of (tenant, month).
type pieceKey struct {
	tenant                         [16]byte
	month, hour                    time.Time
	kind, tier, gpuModel, instType string
}

type pieceSum struct{ gpuMS, quotaMiBMS, vmMS, records int64 }

// pendingColumns are the batch's records split at UTC hour boundaries and summed per key, as
// arrays for insertNewSQL. They are the same sums insertSQL computes in SQL for the inserted rows;
// computing them here spares the server a RETURNING store, a function scan and an aggregate per
// batch. Only valid when every record is inserted (the fast path).
type pendingColumns struct {
	tenant                         []pgtype.UUID
	month, hour                    []time.Time
	kind, tier, gpuModel, instType []string
	gpuMS, quotaMiBMS, vmMS, recs  []int64
}

func toPending(recs []api.UsageRecord, tenants []pgtype.UUID) pendingColumns {
	sums := make(map[pieceKey]*pieceSum, len(recs))
	order := make([]pieceKey, 0, len(recs)) // insertion order: deterministic arrays
	for i, r := range recs {
		// Validate made times UTC and whole milliseconds, so every piece is whole milliseconds
		// and the pieces add up to the record's duration.
		k := pieceKey{tenant: tenants[i].Bytes, month: time.Date(r.Start.Year(), r.Start.Month(), 1, 0, 0, 0, 0, time.UTC),
			kind: r.Kind, tier: r.Tier, gpuModel: r.GPUModel, instType: r.InstanceType}
		first := r.Start.Truncate(time.Hour)
		for h := first; h.Before(r.End); h = h.Add(time.Hour) {
			ms := minTime(r.End, h.Add(time.Hour)).Sub(maxTime(r.Start, h)).Milliseconds()
			k.hour = h
			s := sums[k]
			if s == nil {
				s = &pieceSum{}
				sums[k] = s
				order = append(order, k)
			}
			if r.Kind == api.UsageGPU {
				// Validate bounded gpu_count, quota and duration: no overflow.
				s.gpuMS += int64(r.GPUCount) * ms
				s.quotaMiBMS += int64(r.GPUCount) * int64(r.MemoryQuota/(1<<20)) * ms
			} else {
				s.vmMS += ms
			}
			if h.Equal(first) {
				s.records++
			}
		}
	}
	n := len(order)
	p := pendingColumns{
		tenant: make([]pgtype.UUID, n), month: make([]time.Time, n), hour: make([]time.Time, n),
		kind: make([]string, n), tier: make([]string, n), gpuModel: make([]string, n), instType: make([]string, n),
		gpuMS: make([]int64, n), quotaMiBMS: make([]int64, n), vmMS: make([]int64, n), recs: make([]int64, n),
	}
	for i, k := range order {
		s := sums[k]
		p.tenant[i] = pgtype.UUID{Bytes: k.tenant, Valid: true}
		p.month[i], p.hour[i] = k.month, k.hour
		p.kind[i], p.tier[i], p.gpuModel[i], p.instType[i] = k.kind, k.tier, k.gpuModel, k.instType
		p.gpuMS[i], p.quotaMiBMS[i], p.vmMS[i], p.recs[i] = s.gpuMS, s.quotaMiBMS, s.vmMS, s.records
	}
	return p
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
