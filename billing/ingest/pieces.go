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
