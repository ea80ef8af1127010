package ingest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"gpucloud/api"
)

// The fast path (every id new, the common case) in one transaction and two round trips (see
// pipeline): BEGIN, the batch's stripe locks, its tenants' closed months, the raw rows by binary
// COPY and the rollup pieces (summed in Go) by COPY, both booked in Go on the guess that none of
// the batch's months is closed, the pieces summed over tenants (the fleet rollups) and the
// (tenant, month) pairs not yet listed in billing_usage_months (see months.go); then, if the
// closed months read after the locks are the ones guessed, COMMIT. Otherwise the transaction is
// rolled back and the batch is written again booked by what was read (records for a closed month
// are rare: they arrive after the month was closed). COPY into a table with a primary key still
// checks every id: a batch holding a stored or repeated id fails whole with 23505, nothing lands,
// and store runs it again on the duplicate path (insertSQL). Raw rows and pieces commit together,
// so a record is in the rollups exactly once or not at all.

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

// The fast path's prepared statements, by name.
const (
	lockTenantsStmt  = "billing_ingest_lock_tenants"
	closedMonthsStmt = "billing_ingest_closed_months"
	addMonthsStmt    = "billing_ingest_add_months"
)

var fastStatements = map[string]string{
	lockTenantsStmt:  lockTenantsSQL,
	closedMonthsStmt: closedMonthsSQL,
	addMonthsStmt:    addMonthsSQL,
}

var copyBufs = sync.Pool{New: func() any { return &copyBuf{} }}

// storeFast stores a sorted batch of new ids (tenants: their tenants' bytes). It returns the
// database's error unchanged (store looks for 23505 to take the duplicate path).
func (in *Ingester) storeFast(ctx context.Context, recs []api.UsageRecord, tenants [][16]byte) (int, error) {
	var distinct [][16]byte
	seen := make(map[[16]byte]bool, len(recs))
	months := make([]time.Time, len(recs))
	first := monthOf(recs[0].Start)
	for i, r := range recs {
		if !seen[tenants[i]] {
			seen[tenants[i]] = true
			distinct = append(distinct, tenants[i])
		}
		months[i] = monthOf(r.Start)
		if months[i].Before(first) {
			first = months[i]
		}
	}
	conn, err := in.pool.Acquire(ctx)
	if err != nil {
		return 0, fmt.Errorf("ingest: connect: %w", err)
	}
	// On any failure the transaction is rolled back; a connection that cannot roll back is
	// dropped by the pool on release (it is not idle).
	done := false
	defer func() {
		if !done {
			conn.Exec(context.WithoutCancel(ctx), "ROLLBACK") //nolint:errcheck // see above
		}
		conn.Release()
	}()
	// The statements with parameters are prepared once per connection (pgx remembers them), so
	// each batch spares their parsing and planning.
	for name, sql := range fastStatements {
		if _, err := conn.Conn().Prepare(ctx, name, sql); err != nil {
			return 0, fmt.Errorf("ingest: prepare %s: %w", name, err)
		}
	}
	b := fastBatch{recs: recs, tenants: tenants, months: months, distinct: distinct, first: first, book: booking{}}
	for attempt := 1; ; attempt++ {
		closed, missing, err := b.write(ctx, conn.Conn().PgConn(), &in.months)
		if err != nil {
			return 0, fmt.Errorf("ingest: %d records: %w", len(recs), err)
		}
		if closed.equal(b.book) {
			tag, err := conn.Exec(ctx, "COMMIT")
			if err == nil && tag.String() != "COMMIT" {
				err = fmt.Errorf("transaction not committed (%s)", tag)
			}
			if err != nil {
				return 0, fmt.Errorf("ingest: commit %d records: %w", len(recs), err)
			}
			done = true
			in.months.committed(missing)
			return len(recs), nil
		}
		if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil {
			return 0, fmt.Errorf("ingest: roll back a batch booked on a stale guess: %w", err)
		}
		if attempt == 3 { // closes keep landing between attempts
			return 0, fmt.Errorf("ingest: %d records: the batch's closed months changed at each of %d attempts", len(recs), attempt)
		}
		b.book = closed
	}
}

// fastBatch is a batch on the fast path, booked by book (closed months by tenant).
type fastBatch struct {
	recs     []api.UsageRecord
	tenants  [][16]byte // of each record
	months   []time.Time
	distinct [][16]byte // the tenants, once each
	first    time.Time  // the earliest month
	book     booking
}

// write sends the batch's transaction up to COMMIT in one round trip and returns the closed
// months it read after the locks, and the usage months it added.
func (b *fastBatch) write(ctx context.Context, pg *pgconn.PgConn, known *knownMonths) (booking, []monthKey, error) {
	p := newPipeline(pg)
	defer p.release()
	p.query("begin", "BEGIN")
	// The shared stripe locks first, in their own statement, so the closed months are read after
	// them: closing a tenant's period takes the same lock exclusively, so a record is either booked
	// before the invoice is computed or sees the period closed.
	tenantsParam := uuidArray(b.distinct)
	p.exec(lockTenantsStmt, [][]byte{tenantsParam}, nil)
	closed := booking{}
	p.exec(closedMonthsStmt, [][]byte{tenantsParam, binaryDate(b.first)},
		func(v [][]byte) error {
			if len(v) != 2 || len(v[0]) != 16 {
				return errors.New("unexpected row")
			}
			period, err := readDate(v[1])
			if err != nil {
				return err
			}
			closed.add([16]byte(v[0]), period)
			return nil
		})
	buf := copyBufs.Get().(*copyBuf)
	defer copyBufs.Put(buf)
	for lo := 0; lo < len(b.recs); lo += copyChunk {
		hi := min(lo+copyChunk, len(b.recs))
		copyRecords(buf, b.recs[lo:hi], b.tenants[lo:hi], b.months[lo:hi], b.book)
		p.copyIn("copy records", copyRecordsSQL, buf.bytes())
	}
	pieces, release := splitPieces(b.recs, b.tenants, b.months)
	defer release()
	into := copyPendingSQL
	if spread(len(pieces), len(b.recs)) {
		into = copyDirectSQL
	}
	for lo := 0; lo < len(pieces); lo += copyChunk {
		copyPieces(buf, pieces[lo:min(lo+copyChunk, len(pieces))], b.book)
		p.copyIn("copy rollup pieces", into, buf.bytes())
	}
	copyFleet(buf, fleetRows(pieces))
	p.copyIn("fleet rollups", copyFleetSQL, buf.bytes())
	missing := known.missing(b.tenants, b.months, b.book)
	if len(missing) > 0 {
		p.exec(addMonthsStmt, monthParams(missing), nil)
	}
	if err := p.run(ctx); err != nil {
		return nil, nil, err
	}
	return closed, missing, nil
}

// copyChunk bounds the rows of one COPY statement. PostgreSQL 15 pins the table's tuple
// descriptor once per row its COPY buffers (up to 1,000) in the statement's resource owner, whose
// open-addressing table then holds that many equal entries in one cluster: the cost per row grows
// with the rows per statement (at 1,000, ~18% of the server's ingestion CPU, measured with perf).
// Four statements of 250 cost less than one of 1,000, though each is a round trip.
const copyChunk = 250

// booking says which period a tenant's month is billed in: the month itself unless its invoice is
// closed, else the first open month after it (then the record is an adjustment).
type booking map[[16]byte]map[time.Time]bool // tenant -> closed months

// add notes tenant's month period closed.
func (b booking) add(tenant [16]byte, period time.Time) {
	if b[tenant] == nil {
		b[tenant] = map[time.Time]bool{}
	}
	b[tenant][period.UTC()] = true
}

// equal says b and o hold the same closed months.
func (b booking) equal(o booking) bool {
	if len(b) != len(o) {
		return false
	}
	for t, ms := range b {
		if len(o[t]) != len(ms) {
			return false
		}
		for m := range ms {
			if !o[t][m] {
				return false
			}
		}
	}
	return true
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

func copyRecords(buf *copyBuf, recs []api.UsageRecord, tenants [][16]byte, months []time.Time, book booking) {
	buf.reset()
	for i, r := range recs {
		booked, adj := book.period(tenants[i], months[i])
		buf.row(20)
		buf.text(r.ID)
		buf.text(r.Kind)
		buf.text(r.Source)
		buf.uuid(tenants[i])
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
		copyDimsAndSums(buf, p.key.kind, p.key.tier, p.key.gpuModel, p.key.instType, p.sum)
	}
}
