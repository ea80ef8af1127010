package ingest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"gpucloud/api"
)

// The fast path (every id new, the common case) in one transaction: the batch's stripe locks and
// its tenants' closed months in one round trip, then the raw rows by binary COPY (booked in Go),
// then the rollup pieces (summed in Go), then the pieces summed over tenants (the fleet rollups)
// and the (tenant, month) pairs not yet listed in billing_usage_months (see months.go), then
// COMMIT. COPY into a table with a primary key still checks every id: a batch holding a stored or
// repeated id fails whole with 23505, nothing lands, and store runs it again on the duplicate path
// (insertSQL). Raw rows and pieces commit together, so a record is in the rollups exactly once or
// not at all.

// copyRecordsSQL names the columns copyRecords writes, in its order.
const copyRecordsSQL = `COPY billing_usage_records (id, kind, source, tenant_id, instance_id, session_id,
    start_at, end_at, gpu_model, tier, gpu_count, memory_quota, memory_peak_bytes, memory_avg_bytes,
    bytes_moved, instance_type, vcpus, memory_mib, booked_period, adjustment) FROM STDIN (FORMAT binary)`

// copyPiecesSQL names the columns copyPieces writes, in its order, into table: the pending
// table (batches that compress) or billing_usage_direct (spread batches, see spread).
func copyPiecesSQL(table string) string {
	return `COPY ` + table + ` (tenant_id, booked_period, adjustment, hour, kind, tier,
    gpu_model, instance_type, gpu_ms, quota_mib_ms, vm_ms, records) FROM STDIN (FORMAT binary)`
}

var (
	copyPendingSQL = copyPiecesSQL("billing_usage_pending")
	copyDirectSQL  = copyPiecesSQL("billing_usage_direct")
)

// closedMonthsSQL reads the batch's tenants' ($1) closed months from its earliest month ($2) on,
// in one index scan (usually none: only records arriving after their month closed meet one).
const closedMonthsSQL = `SELECT tenant_id, period FROM billing_invoices
WHERE tenant_id = ANY ($1::uuid[]) AND period >= $2 AND status = 'closed'`

var copyBufs = sync.Pool{New: func() any { return &copyBuf{} }}

// storeFast stores a sorted batch of new ids. It returns the database's error unchanged (store
// looks for 23505 to take the duplicate path).
func (in *Ingester) storeFast(ctx context.Context, recs []api.UsageRecord) (int, error) {
	tenants := make([]pgtype.UUID, len(recs))
	seen := make(map[[16]byte]bool)
	var distinct []pgtype.UUID
	first := monthOf(recs[0].Start)
	for i, r := range recs {
		// Validate normalised TenantID to a parsed uuid.
		tenants[i] = pgtype.UUID{Bytes: uuid.MustParse(r.TenantID), Valid: true}
		if !seen[tenants[i].Bytes] {
			seen[tenants[i].Bytes] = true
			distinct = append(distinct, tenants[i])
		}
		if m := monthOf(r.Start); m.Before(first) {
			first = m
		}
	}
	tx, err := in.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("ingest: begin: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after commit
	// The shared stripe locks first, in their own statement, so the closed months are read after
	// them: closing a tenant's period takes the same lock exclusively, so a record is either booked
	// before the invoice is computed or sees the period closed.
	b := &pgx.Batch{}
	b.Queue(lockTenantsSQL, distinct)
	b.Queue(closedMonthsSQL, distinct, first)
	br := tx.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return 0, fmt.Errorf("ingest: lock tenants: %w", err)
	}
	book, err := readBooking(br)
	br.Close()
	if err != nil {
		return 0, err
	}
	buf := copyBufs.Get().(*copyBuf)
	defer copyBufs.Put(buf)
	copyRecords(buf, recs, tenants, book)
	if _, err := tx.Conn().PgConn().CopyFrom(ctx, buf.reader(), copyRecordsSQL); err != nil {
		return 0, fmt.Errorf("ingest: copy %d records: %w", len(recs), err)
	}
	pieces := splitPieces(recs, tenants)
	into := copyPendingSQL
	if spread(len(pieces), len(recs)) {
		into = copyDirectSQL
	}
	copyPieces(buf, pieces, book)
	if _, err := tx.Conn().PgConn().CopyFrom(ctx, buf.reader(), into); err != nil {
		return 0, fmt.Errorf("ingest: copy %d rollup pieces: %w", len(pieces), err)
	}
	// The fleet's share and the months not yet listed, in one round trip.
	adds := &pgx.Batch{}
	adds.Queue(addFleetSQL, fleetArgs(pieces)...)
	months := in.months.missing(recs, tenants, book)
	if len(months) > 0 {
		adds.Queue(addMonthsSQL, monthArgs(months)...)
	}
	if err := tx.SendBatch(ctx, adds).Close(); err != nil {
		return 0, fmt.Errorf("ingest: fleet rollups and %d usage months: %w", len(months), err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("ingest: commit %d records: %w", len(recs), err)
	}
	in.months.committed(months)
	return len(recs), nil
}

// booking says which period a tenant's month is billed in: the month itself unless its invoice is
// closed, else the first open month after it (then the record is an adjustment).
type booking map[[16]byte]map[time.Time]bool // tenant -> closed months

func readBooking(br pgx.BatchResults) (booking, error) {
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("ingest: closed months: %w", err)
	}
	book := booking{}
	var tenant pgtype.UUID
	var period time.Time
	_, err = pgx.ForEachRow(rows, []any{&tenant, &period}, func() error {
		if book[tenant.Bytes] == nil {
			book[tenant.Bytes] = map[time.Time]bool{}
		}
		book[tenant.Bytes][period.UTC()] = true
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("ingest: closed months: %w", err)
	}
	return book, nil
}

// period returns the booked period of tenant's month and whether it is an adjustment.
func (b booking) period(tenant [16]byte, month time.Time) (time.Time, bool) {
	closed := b[tenant]
	p := month
	for closed[p] {
		p = p.AddDate(0, 1, 0)
	}
	return p, !p.Equal(month)
}

func copyRecords(buf *copyBuf, recs []api.UsageRecord, tenants []pgtype.UUID, book booking) {
	buf.reset()
	for i, r := range recs {
		booked, adj := book.period(tenants[i].Bytes, monthOf(r.Start))
		buf.row(20)
		buf.text(r.ID)
		buf.text(r.Kind)
		buf.text(r.Source)
		buf.uuid(tenants[i].Bytes)
		buf.text(r.InstanceID)
		buf.text(r.SessionID)
		buf.timestamptz(r.Start)
		buf.timestamptz(r.End)
		buf.text(r.GPUModel)
		buf.text(r.Tier)
		buf.int32(int32(r.GPUCount))
		// Validate bounded these below 2^63.
		buf.int64(int64(r.MemoryQuota))
		buf.int64(int64(r.MemoryPeakBytes))
		buf.int64(int64(r.MemoryAvgBytes))
		buf.int64(int64(r.BytesMoved))
		buf.text(r.InstanceType)
		buf.int32(int32(r.VCPUs))
		buf.int32(int32(r.MemoryMiB))
		buf.date(booked)
		buf.bool(adj)
	}
}

func copyPieces(buf *copyBuf, pieces []piece, book booking) {
	buf.reset()
	for _, p := range pieces {
		booked, adj := book.period(p.key.tenant, p.key.month)
		buf.row(12)
		buf.uuid(p.key.tenant)
		buf.date(booked)
		buf.bool(adj)
		buf.timestamptz(p.key.hour)
		buf.text(p.key.kind)
		buf.text(p.key.tier)
		buf.text(p.key.gpuModel)
		buf.text(p.key.instType)
		buf.int64(p.sum.gpuMS)
		buf.int64(p.sum.quotaMiBMS)
		buf.int64(p.sum.vmMS)
		buf.int64(p.sum.records)
	}
}
