package ingest

import (
	"sync"
	"time"

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

// splitter splits records into pieces; reused from batch to batch (its map and slice are most
// of the ingester's own garbage otherwise).
type splitter struct {
	index  map[pieceKey]int
	pieces []piece
}

var splitters = sync.Pool{New: func() any { return &splitter{index: map[pieceKey]int{}} }}

// splitPieces cuts the batch's records at UTC hour boundaries and sums them per key, in the order
// keys first appear (deterministic). These are the sums insertSQL computes in SQL for the rows it
// inserted; computing them here spares the server a RETURNING store, a function scan and an
// aggregate per batch. Only valid when every record is inserted (the fast path). The pieces are
// valid until release.
func splitPieces(recs []api.UsageRecord, tenants [][16]byte, months []time.Time) (pieces []piece, release func()) {
	sp := splitters.Get().(*splitter)
	clear(sp.index)
	pieces = sp.pieces[:0]
	for i, r := range recs {
		// Validate made times UTC and whole milliseconds, so every piece is whole milliseconds
		// and the pieces add up to the record's duration.
		k := pieceKey{tenant: tenants[i], month: months[i],
			kind: r.Kind, tier: r.Tier, gpuModel: r.GPUModel, instType: r.InstanceType}
		first := r.Start.Truncate(time.Hour)
		for h := first; h.Before(r.End); h = h.Add(time.Hour) {
			ms := minTime(r.End, h.Add(time.Hour)).Sub(maxTime(r.Start, h)).Milliseconds()
			k.hour = h
			j, ok := sp.index[k]
			if !ok {
				j = len(pieces)
				sp.index[k] = j
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
	return pieces, func() {
		clear(pieces) // no strings kept alive from the pool
		sp.pieces = pieces[:0]
		splitters.Put(sp)
	}
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

// copyFleetSQL appends a batch's pieces summed over its tenants, as copyFleet writes them.
const copyFleetSQL = `COPY billing_usage_fleet_pending (hour, kind, tier, gpu_model, instance_type,
    gpu_ms, quota_mib_ms, vm_ms, records) FROM STDIN (FORMAT binary)`

type fleetRow struct {
	key fleetKey
	sum pieceSum
}

// fleetRows sums pieces over tenants: a batch's thousand pieces are a handful of fleet rows.
func fleetRows(pieces []piece) []fleetRow {
	index := map[fleetKey]int{}
	var rows []fleetRow
	for _, p := range pieces {
		k := fleetKey{p.key.hour, p.key.kind, p.key.tier, p.key.gpuModel, p.key.instType}
		j, ok := index[k]
		if !ok {
			j = len(rows)
			index[k] = j
			rows = append(rows, fleetRow{key: k})
		}
		s := &rows[j].sum
		s.gpuMS += p.sum.gpuMS
		s.quotaMiBMS += p.sum.quotaMiBMS
		s.vmMS += p.sum.vmMS
		s.records += p.sum.records
	}
	return rows
}

func copyFleet(buf *copyBuf, rows []fleetRow) {
	buf.reset()
	for _, r := range rows {
		buf.row(9)
		buf.timestamptz(r.key.hour)
		copyDimsAndSums(buf, r.key.kind, r.key.tier, r.key.gpuModel, r.key.instType, r.sum)
	}
}

// copyDimsAndSums writes the columns rollup rows share, in their order: kind, tier, gpu_model,
// instance_type, gpu_ms, quota_mib_ms, vm_ms, records.
func copyDimsAndSums(buf *copyBuf, kind, tier, gpuModel, instType string, s pieceSum) {
	buf.text(kind)
	buf.text(tier)
	buf.text(gpuModel)
	buf.text(instType)
	buf.int64(s.gpuMS)
	buf.int64(s.quotaMiBMS)
	buf.int64(s.vmMS)
	buf.int64(s.records)
}
