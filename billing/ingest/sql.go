package ingest

// insertSQL stores a sorted batch in one statement: it books each record (its month, or the first
// open month after it when that month is closed for the tenant: an adjustment) and inserts the raw
// rows, ignoring ids already present; the command tag counts the rows inserted. The rollup flush
// finds them by their transaction (see migration 00101).
const insertSQL = insertRecordsSQL + " ON CONFLICT (id) DO NOTHING"

// insertNewSQL is the fast path for a batch of new ids (the common case): no ON CONFLICT, which
// costs a second index descent per row (the speculative pre-check) plus a WAL record confirming
// each speculative insert, while a plain insert checks uniqueness in its one descent. A batch
// holding a stored or repeated id fails whole with a unique violation (23505) and is retried
// with insertSQL.
const insertNewSQL = insertRecordsSQL

const insertRecordsSQL = `
WITH input AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::uuid[], $5::text[], $6::text[],
        $7::timestamptz[], $8::timestamptz[], $9::text[], $10::text[], $11::int[], $12::bigint[],
        $13::bigint[], $14::bigint[], $15::bigint[], $16::text[], $17::int[], $18::int[])
    WITH ORDINALITY AS u(id, kind, source, tenant_id, instance_id, session_id, start_at, end_at,
        gpu_model, tier, gpu_count, memory_quota, memory_peak_bytes, memory_avg_bytes, bytes_moved,
        instance_type, vcpus, memory_mib, ord)
),
months AS (
    SELECT DISTINCT tenant_id, date_trunc('month', start_at AT TIME ZONE 'UTC')::date AS month FROM input
),
booking AS MATERIALIZED (
    SELECT m.tenant_id, m.month,
        (SELECT min(c.month) FROM (
            SELECT m.month
            UNION ALL
            SELECT (i.period + interval '1 month')::date FROM billing_invoices i
            WHERE i.tenant_id = m.tenant_id AND i.status = 'closed' AND i.period >= m.month
        ) AS c(month)
        WHERE NOT EXISTS (SELECT 1 FROM billing_invoices i
            WHERE i.tenant_id = m.tenant_id AND i.status = 'closed' AND i.period = c.month)
        ) AS booked_period
    FROM months m
)
INSERT INTO billing_usage_records (id, kind, source, tenant_id, instance_id, session_id,
        start_at, end_at, gpu_model, tier, gpu_count, memory_quota, memory_peak_bytes,
        memory_avg_bytes, bytes_moved, instance_type, vcpus, memory_mib, booked_period, adjustment)
    SELECT u.id, u.kind, u.source, u.tenant_id, u.instance_id, u.session_id, u.start_at, u.end_at,
        u.gpu_model, u.tier, u.gpu_count, u.memory_quota, u.memory_peak_bytes, u.memory_avg_bytes,
        u.bytes_moved, u.instance_type, u.vcpus, u.memory_mib, b.booked_period,
        b.booked_period <> b.month
    FROM input u
    JOIN booking b ON b.tenant_id = u.tenant_id AND b.month = date_trunc('month', u.start_at AT TIME ZONE 'UTC')::date
    ORDER BY u.ord`

// rollupSQL adds the records committed since the last flush to the hourly rollups and moves the
// watermark: the records visible to this statement's snapshot but not to the previous flush's.
// The scalar subqueries run once (InitPlans), so the xid bound is an index condition on the BRIN
// index. Months and hours are UTC. Times are whole milliseconds, so the per-hour pieces are whole
// milliseconds and add up exactly to the record's duration.
const rollupSQL = `
WITH fresh AS (
    SELECT r.tenant_id, r.booked_period, r.adjustment, r.kind, r.tier, r.gpu_model,
        r.instance_type, r.start_at, r.end_at, r.gpu_count, r.memory_quota
    FROM billing_usage_records r
    WHERE r.xid >= (SELECT pg_snapshot_xmin(snap)::text::bigint FROM billing_rollup_watermark)
      AND NOT pg_visible_in_snapshot(r.xid::text::xid8, (SELECT snap FROM billing_rollup_watermark))
),
pieces AS (
    SELECT f.*, h.hour,
        (extract(epoch FROM least(f.end_at, h.hour + interval '1 hour') - greatest(f.start_at, h.hour)) * 1000)::bigint AS ms
    FROM fresh f
    CROSS JOIN LATERAL generate_series(date_trunc('hour', f.start_at, 'UTC'),
        f.end_at - interval '1 microsecond', interval '1 hour') AS h(hour)
),
mark AS (
    -- pg_current_snapshot() is this statement's snapshot, the one fresh was read with.
    UPDATE billing_rollup_watermark SET snap = pg_current_snapshot()
)
INSERT INTO billing_usage_hourly AS r (tenant_id, booked_period, adjustment, hour, kind, tier,
    gpu_model, instance_type, gpu_ms, quota_mib_ms, vm_ms, records)
SELECT tenant_id, booked_period, adjustment, hour, kind, tier, gpu_model, instance_type,
    sum(CASE WHEN kind = 'gpu' THEN gpu_count * ms ELSE 0 END),
    sum(CASE WHEN kind = 'gpu' THEN gpu_count * (memory_quota / 1048576) * ms ELSE 0 END),
    sum(CASE WHEN kind = 'vm' THEN ms ELSE 0 END),
    count(*) FILTER (WHERE hour = date_trunc('hour', start_at, 'UTC'))
FROM pieces
GROUP BY tenant_id, booked_period, adjustment, hour, kind, tier, gpu_model, instance_type
ORDER BY tenant_id, booked_period, adjustment, hour, kind, tier, gpu_model, instance_type
ON CONFLICT (tenant_id, booked_period, adjustment, hour, kind, tier, gpu_model, instance_type)
DO UPDATE SET gpu_ms = r.gpu_ms + excluded.gpu_ms,
    quota_mib_ms = r.quota_mib_ms + excluded.quota_mib_ms,
    vm_ms = r.vm_ms + excluded.vm_ms,
    records = r.records + excluded.records`

// summarizeSQL indexes the block ranges filled since the last flush, so rollupSQL skips them once
// flushed (unsummarised ranges are always read).
const summarizeSQL = `SELECT brin_summarize_new_values('billing_usage_records_xid'::regclass)`

// flushSQL moves rows left in billing_usage_pending (written before migration 00101) into the
// hourly rollups; nothing writes that table any more.
const flushSQL = `
WITH moved AS (
    DELETE FROM billing_usage_pending RETURNING *
)
INSERT INTO billing_usage_hourly AS r (tenant_id, booked_period, adjustment, hour, kind, tier,
    gpu_model, instance_type, gpu_ms, quota_mib_ms, vm_ms, records)
SELECT tenant_id, booked_period, adjustment, hour, kind, tier, gpu_model, instance_type,
    sum(gpu_ms), sum(quota_mib_ms), sum(vm_ms), sum(records)
FROM moved
GROUP BY tenant_id, booked_period, adjustment, hour, kind, tier, gpu_model, instance_type
ORDER BY tenant_id, booked_period, adjustment, hour, kind, tier, gpu_model, instance_type
ON CONFLICT (tenant_id, booked_period, adjustment, hour, kind, tier, gpu_model, instance_type)
DO UPDATE SET gpu_ms = r.gpu_ms + excluded.gpu_ms,
    quota_mib_ms = r.quota_mib_ms + excluded.quota_mib_ms,
    vm_ms = r.vm_ms + excluded.vm_ms,
    records = r.records + excluded.records`
