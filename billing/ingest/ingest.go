package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"gpucloud/api"
)

// Ingester writes usage batches. It is safe for concurrent use.
type Ingester struct {
	pool   *pgxpool.Pool
	now    func() time.Time
	log    *slog.Logger
	months knownMonths
}

// New returns an ingester on pool.
func New(pool *pgxpool.Pool, log *slog.Logger) *Ingester {
	if log == nil {
		log = slog.Default()
	}
	return &Ingester{pool: pool, now: time.Now, log: log}
}

// SetClock replaces the clock that bounds future intervals (tests).
func (in *Ingester) SetClock(now func() time.Time) { in.now = now }

// ErrBatchTooLarge is returned for batches over MaxBatch records; nothing of them lands.
var ErrBatchTooLarge = fmt.Errorf("a batch holds at most %d records", MaxBatch)

// Ingest validates the batch and stores its valid records exactly once. Malformed records are
// listed in the result with their reason; duplicates (already stored, or repeated in the batch)
// are counted and ignored. accept, when not nil, may refuse a valid record (e.g. one whose source
// is not the calling daemon) by returning a reason; it gets the record's index in b and the
// record as normalised.
func (in *Ingester) Ingest(ctx context.Context, b api.UsageBatch, accept func(int, api.UsageRecord) string) (api.UsageBatchResult, error) {
	res := api.UsageBatchResult{Rejected: []api.UsageRejection{}}
	if len(b.Records) > MaxBatch {
		return res, ErrBatchTooLarge
	}
	now := in.now()
	valid := make([]api.UsageRecord, 0, len(b.Records))
	tenants := make([][16]byte, 0, len(b.Records))
	for i, r := range b.Records {
		n, tenant, err := validate(r, now)
		if err == nil && accept != nil {
			if reason := accept(i, n); reason != "" {
				err = errors.New(reason)
			}
		}
		if err != nil {
			res.Rejected = append(res.Rejected, api.UsageRejection{Index: i, ID: r.ID, Reason: err.Error()})
			continue
		}
		valid = append(valid, n)
		tenants = append(tenants, tenant)
	}
	if len(valid) == 0 {
		return res, nil
	}
	// One order for every batch: two batches sharing ids then wait on each other instead of
	// deadlocking on the primary key. Daemons number their records in order, so a batch usually
	// comes sorted.
	if !sort.SliceIsSorted(valid, func(i, j int) bool { return valid[i].ID < valid[j].ID }) {
		sort.Sort(byID{valid, tenants})
	}
	inserted, err := in.store(ctx, valid, tenants)
	if err != nil {
		return res, err
	}
	res.Accepted = inserted
	res.Duplicates = len(valid) - inserted
	return res, nil
}

// byID sorts records by id, and their tenants' bytes with them.
type byID struct {
	recs    []api.UsageRecord
	tenants [][16]byte
}

func (b byID) Len() int           { return len(b.recs) }
func (b byID) Less(i, j int) bool { return b.recs[i].ID < b.recs[j].ID }
func (b byID) Swap(i, j int) {
	b.recs[i], b.recs[j] = b.recs[j], b.recs[i]
	b.tenants[i], b.tenants[j] = b.tenants[j], b.tenants[i]
}

// store runs the batch, retrying the rare deadlock between rollup upserts. It first tries the fast
// path (every id new, the common case); a batch holding an id already stored or repeated fails
// whole, nothing of it lands, and runs again on the duplicate path (ON CONFLICT DO NOTHING).
func (in *Ingester) store(ctx context.Context, recs []api.UsageRecord, tenants [][16]byte) (int, error) {
	fast := true
	for attempt := 1; ; attempt++ {
		var n int
		var err error
		if fast {
			n, err = in.storeFast(ctx, recs, tenants)
		} else {
			n, err = in.storeDuplicates(ctx, recs)
		}
		var pgErr *pgconn.PgError
		if err != nil && errors.As(err, &pgErr) && pgErr.Code == "23505" && fast {
			fast = false
			continue
		}
		if err != nil && errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "40001") && attempt < 5 {
			in.log.Warn("usage batch retried", "attempt", attempt, "err", err)
			continue
		}
		return n, err
	}
}

// spread says whether a batch's pieces hardly compress: nine rollup keys or more per ten records,
// i.e. its records are spread over so many tenants and keys that hardly two share one. Then
// later batches hardly share them either, and the pieces are appended to billing_usage_direct,
// a child of the hourly rollups that readers sum with them: parking them in billing_usage_pending buys nothing
// (the flush would upsert as many rows), and upserting them costs a conflict check and a
// speculative insert per piece. Batches whose keys repeat (e.g. 1,000 records over 100 tenants
// give ~500-650 keys) keep to the pending table, which the flush folds into one hourly row per
// key, so their rollups stay compact for the reports.
func spread(pieces, records int) bool { return 10*pieces >= 9*records }

// storeDuplicates stores a batch that holds ids already stored (or repeated), ignoring those, in
// one statement (insertSQL) that computes the pieces of the rows it actually inserted.
func (in *Ingester) storeDuplicates(ctx context.Context, recs []api.UsageRecord) (int, error) {
	c := toColumns(recs)
	// Both statements go in one round trip; a batch without BEGIN runs as one implicit
	// transaction in PostgreSQL (all or nothing, locks held to its end). The shared stripe locks
	// come first, in their own statement, so the insert's snapshot is taken after them.
	b := &pgx.Batch{}
	b.Queue(lockTenantsSQL, c.tenantID)
	b.Queue(insertSQL, c.id, c.kind, c.source, c.tenantID, c.instanceID, c.sessionID,
		c.start, c.end, c.gpuModel, c.tier, c.gpuCount, c.memoryQuota, c.memoryPeak, c.memoryAvg,
		c.bytesMoved, c.instanceType, c.vcpus, c.memoryMiB)
	br := in.pool.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return 0, fmt.Errorf("ingest: lock tenants: %w", err)
	}
	var n int
	if err := br.QueryRow().Scan(&n); err != nil {
		br.Close()
		return 0, fmt.Errorf("ingest: insert %d records: %w", len(recs), err)
	}
	if err := br.Close(); err != nil {
		return 0, fmt.Errorf("ingest: commit %d records: %w", len(recs), err)
	}
	return n, nil
}

// Billing locks are striped: a tenant's lock is one of tenantLockStripes advisory locks (class
// billingLockClass, the stripe from the tenant id's hash). A batch of 1,000 records over 10,000
// tenants then takes at most 64 shared locks instead of ~1,000, while a close and a batch for the
// same tenant still always meet on the same lock. The price: a close (a few milliseconds) also
// holds back batches of the other tenants of its stripe, which at that scale is most batches.
const (
	tenantLockStripes = 64         // a power of two
	billingLockClass  = 1651076199 // the two-int4 key space: apart from every bigint advisory key
)

// tenantStripeSQL is the SQL for the stripe of the uuid expression id.
func tenantStripeSQL(id string) string {
	return fmt.Sprintf(`(hashtextextended(%s::text, 0) & %d)::int`, id, tenantLockStripes-1)
}

// LockTenantSQL takes a tenant's billing lock ($1 uuid): shared by ingestion, exclusive by closing.
var LockTenantSQL = fmt.Sprintf(`SELECT pg_advisory_xact_lock(%d, %s)`, billingLockClass, tenantStripeSQL("$1::uuid"))

// lockTenantsSQL takes the shared locks of every stripe of the batch's tenants ($1 uuid[]), in
// one order for every batch.
var lockTenantsSQL = fmt.Sprintf(`
SELECT count(pg_advisory_xact_lock_shared(%d, s))
FROM (SELECT DISTINCT %s AS s FROM unnest($1::uuid[]) AS t ORDER BY s) AS stripes`, billingLockClass, tenantStripeSQL("t"))

type columns struct {
	id, kind, source                               []string
	tenantID                                       []pgtype.UUID // binary: text would be parsed by array_in
	instanceID, sessionID                          []string
	start, end                                     []time.Time
	gpuModel, tier                                 []string
	gpuCount                                       []int32
	memoryQuota, memoryPeak, memoryAvg, bytesMoved []int64
	instanceType                                   []string
	vcpus, memoryMiB                               []int32
}

func toColumns(recs []api.UsageRecord) columns {
	n := len(recs)
	c := columns{
		id: make([]string, n), kind: make([]string, n), source: make([]string, n),
		tenantID: make([]pgtype.UUID, n), instanceID: make([]string, n), sessionID: make([]string, n),
		start: make([]time.Time, n), end: make([]time.Time, n),
		gpuModel: make([]string, n), tier: make([]string, n), gpuCount: make([]int32, n),
		memoryQuota: make([]int64, n), memoryPeak: make([]int64, n), memoryAvg: make([]int64, n),
		bytesMoved: make([]int64, n), instanceType: make([]string, n),
		vcpus: make([]int32, n), memoryMiB: make([]int32, n),
	}
	for i, r := range recs {
		c.id[i], c.kind[i], c.source[i] = r.ID, r.Kind, r.Source
		// Validate normalised TenantID to a parsed uuid.
		c.tenantID[i] = pgtype.UUID{Bytes: uuid.MustParse(r.TenantID), Valid: true}
		c.instanceID[i], c.sessionID[i] = r.InstanceID, r.SessionID
		c.start[i], c.end[i] = r.Start, r.End
		c.gpuModel[i], c.tier[i], c.gpuCount[i] = r.GPUModel, r.Tier, int32(r.GPUCount)
		// Validate bounded these below 2^63.
		c.memoryQuota[i], c.memoryPeak[i] = int64(r.MemoryQuota), int64(r.MemoryPeakBytes)
		c.memoryAvg[i], c.bytesMoved[i] = int64(r.MemoryAvgBytes), int64(r.BytesMoved)
		c.instanceType[i], c.vcpus[i], c.memoryMiB[i] = r.InstanceType, int32(r.VCPUs), int32(r.MemoryMiB)
	}
	return c
}
