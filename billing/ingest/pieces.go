package ingest

import (
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"gpucloud/api"
)

// pieceKey is a rollup row's key before booking: the record's own month stands where the booked
// period and adjustment flag go (booking maps each (tenant, month) to them).
type pieceKey struct {
	tenant                         [16]byte
	month, hour                    time.Time
	kind, tier, gpuModel, instType string
}

type pieceSum struct{ gpuMS, quotaMiBMS, vmMS, records int64 }

// piece is one pending rollup row before booking: a key and its sums.
type piece struct {
	key pieceKey
	sum pieceSum
}

// splitPieces cuts the batch's records at UTC hour boundaries and sums them per key, in the order
// keys first appear (deterministic). These are the sums insertSQL computes in SQL for the rows it
// inserted; computing them here spares the server a RETURNING store, a function scan and an
// aggregate per batch. Only valid when every record is inserted (the fast path).
func splitPieces(recs []api.UsageRecord, tenants []pgtype.UUID) []piece {
	index := make(map[pieceKey]int, len(recs))
	pieces := make([]piece, 0, len(recs))
	for i, r := range recs {
		// Validate made times UTC and whole milliseconds, so every piece is whole milliseconds
		// and the pieces add up to the record's duration.
		k := pieceKey{tenant: tenants[i].Bytes, month: monthOf(r.Start),
			kind: r.Kind, tier: r.Tier, gpuModel: r.GPUModel, instType: r.InstanceType}
		first := r.Start.Truncate(time.Hour)
		for h := first; h.Before(r.End); h = h.Add(time.Hour) {
			ms := minTime(r.End, h.Add(time.Hour)).Sub(maxTime(r.Start, h)).Milliseconds()
			k.hour = h
			j, ok := index[k]
			if !ok {
				j = len(pieces)
				index[k] = j
				pieces = append(pieces, piece{key: k})
			}
			s := &pieces[j].sum
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
	return pieces
}

// monthOf is the first instant of t's UTC month.
func monthOf(t time.Time) time.Time { return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC) }

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

// fleetKey is a fleet rollup row's key: a piece's key without its tenant and booking.
type fleetKey struct {
	hour                           time.Time
	kind, tier, gpuModel, instType string
}

// addFleetSQL appends a batch's pieces summed over its tenants ($1-$9, one element per row).
const addFleetSQL = `INSERT INTO billing_usage_fleet_pending (hour, kind, tier, gpu_model, instance_type,
    gpu_ms, quota_mib_ms, vm_ms, records)
SELECT * FROM unnest($1::timestamptz[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[],
    $7::bigint[], $8::bigint[], $9::bigint[])`

// fleetArgs sums pieces over tenants (a batch's thousand pieces are a handful of fleet rows) and
// returns them as addFleetSQL's arguments.
func fleetArgs(pieces []piece) []any {
	index := map[fleetKey]int{}
	var (
		hours                          []time.Time
		kinds, tiers, models, types    []string
		gpuMS, quotaMiBMS, vmMS, count []int64
	)
	for _, p := range pieces {
		k := fleetKey{p.key.hour, p.key.kind, p.key.tier, p.key.gpuModel, p.key.instType}
		j, ok := index[k]
		if !ok {
			j = len(hours)
			index[k] = j
			hours, kinds, tiers = append(hours, k.hour), append(kinds, k.kind), append(tiers, k.tier)
			models, types = append(models, k.gpuModel), append(types, k.instType)
			gpuMS, quotaMiBMS, vmMS, count = append(gpuMS, 0), append(quotaMiBMS, 0), append(vmMS, 0), append(count, 0)
		}
		gpuMS[j] += p.sum.gpuMS
		quotaMiBMS[j] += p.sum.quotaMiBMS
		vmMS[j] += p.sum.vmMS
		count[j] += p.sum.records
	}
	return []any{hours, kinds, tiers, models, types, gpuMS, quotaMiBMS, vmMS, count}
}
