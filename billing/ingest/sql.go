package ingest

// insertSQL stores a sorted batch in one statement: it books each record (its month, or the first
// open month after it when that month is closed for the tenant: an adjustment), inserts the raw
// rows ignoring ids already present, and appends only the rows actually inserted, split at hour
// boundaries and summed, to billing_usage_pending (and summed over tenants to
// billing_usage_fleet_pending), and their (tenant, booked period) pairs to billing_usage_months.
// It returns how many rows were inserted.
//
// Months and hours are UTC. Times arrive truncated to milliseconds, so the per-hour pieces are
// whole milliseconds and add up exactly to the record's duration.
const insertSQL = insertHead + "ON CONFLICT (id) DO NOTHING" + insertTail

const insertHead = `
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
-- The batch's tenants' closed months from the earliest month it holds on, read in one index scan
-- (usually none: only records arriving after their month closed meet one).
closed AS MATERIALIZED (
    SELECT i.tenant_id, i.period FROM billing_invoices i
    WHERE i.tenant_id = ANY (ARRAY(SELECT DISTINCT tenant_id FROM months))
        AND i.period >= (SELECT min(month) FROM months) AND i.status = 'closed'
),
-- A record's month is booked as itself unless closed; then as the first open month after it: the
-- smallest of the month and every closed month's successor that is itself not closed.
candidates AS (
    SELECT m.tenant_id, m.month, m.month AS booked FROM months m
    UNION ALL
    SELECT m.tenant_id, m.month, (c.period + interval '1 month')::date
    FROM months m JOIN closed c ON c.tenant_id = m.tenant_id AND c.period >= m.month
),
booking AS MATERIALIZED (
    SELECT k.tenant_id, k.month, min(k.booked) AS booked_period FROM candidates k
    WHERE NOT EXISTS (SELECT 1 FROM closed c WHERE c.tenant_id = k.tenant_id AND c.period = k.booked)
    GROUP BY k.tenant_id, k.month
),
ins AS (
    INSERT INTO billing_usage_records (id, kind, source, tenant_id, instance_id, session_id,
        start_at, end_at, gpu_model, tier, gpu_count, memory_quota, memory_peak_bytes,
        memory_avg_bytes, bytes_moved, instance_type, vcpus, memory_mib, booked_period, adjustment)
    SELECT u.id, u.kind, u.source, u.tenant_id, u.instance_id, u.session_id, u.start_at, u.end_at,
        u.gpu_model, u.tier, u.gpu_count, u.memory_quota, u.memory_peak_bytes, u.memory_avg_bytes,
        u.bytes_moved, u.instance_type, u.vcpus, u.memory_mib, b.booked_period,
        b.booked_period <> b.month
    FROM input u
    JOIN booking b ON b.tenant_id = u.tenant_id AND b.month = date_trunc('month', u.start_at AT TIME ZONE 'UTC')::date
    ORDER BY u.ord
    `

const insertTail = `
    RETURNING tenant_id, booked_period, adjustment, kind, tier, gpu_model, instance_type,
        start_at, end_at, gpu_count, memory_quota
),
pieces AS (
    SELECT ins.*, h.hour,
        (extract(epoch FROM least(ins.end_at, h.hour + interval '1 hour') - greatest(ins.start_at, h.hour)) * 1000)::bigint AS ms
    FROM ins
    CROSS JOIN LATERAL generate_series(date_trunc('hour', ins.start_at, 'UTC'),
        ins.end_at - interval '1 microsecond', interval '1 hour') AS h(hour)
),
grouped AS (
    INSERT INTO billing_usage_pending (tenant_id, booked_period, adjustment, hour, kind, tier,
        gpu_model, instance_type, gpu_ms, quota_mib_ms, vm_ms, records)
    SELECT tenant_id, booked_period, adjustment, hour, kind, tier, gpu_model, instance_type,
        sum(CASE WHEN kind = 'gpu' THEN gpu_count * ms ELSE 0 END),
        sum(CASE WHEN kind = 'gpu' THEN gpu_count * (memory_quota / 1048576) * ms ELSE 0 END),
        sum(CASE WHEN kind = 'vm' THEN ms ELSE 0 END),
        count(*) FILTER (WHERE hour = date_trunc('hour', start_at, 'UTC'))
    FROM pieces
    GROUP BY tenant_id, booked_period, adjustment, hour, kind, tier, gpu_model, instance_type
),
fleet AS (
    INSERT INTO billing_usage_fleet_pending (hour, kind, tier, gpu_model, instance_type, gpu_ms,
        quota_mib_ms, vm_ms, records)
    SELECT hour, kind, tier, gpu_model, instance_type,
        sum(CASE WHEN kind = 'gpu' THEN gpu_count * ms ELSE 0 END),
        sum(CASE WHEN kind = 'gpu' THEN gpu_count * (memory_quota / 1048576) * ms ELSE 0 END),
        sum(CASE WHEN kind = 'vm' THEN ms ELSE 0 END),
        count(*) FILTER (WHERE hour = date_trunc('hour', start_at, 'UTC'))
    FROM pieces
    GROUP BY hour, kind, tier, gpu_model, instance_type
),
listed AS (
    INSERT INTO billing_usage_months (tenant_id, booked_period)
    SELECT DISTINCT tenant_id, booked_period FROM ins ORDER BY 1, 2
    ON CONFLICT DO NOTHING
)
-- Data-modifying CTEs always run to completion, read or not.
SELECT count(*)::int FROM ins`

// flushFleetSQL does for the fleet rollups what flushSQL does for the tenants' (in the same
// transaction, so a report never sees one without the other).
const flushFleetSQL = `
WITH moved AS (
    DELETE FROM billing_usage_fleet_pending RETURNING *
)
INSERT INTO billing_usage_fleet AS r (hour, kind, tier, gpu_model, instance_type, gpu_ms,
    quota_mib_ms, vm_ms, records)
SELECT hour, kind, tier, gpu_model, instance_type, sum(gpu_ms), sum(quota_mib_ms), sum(vm_ms), sum(records)
FROM moved
GROUP BY hour, kind, tier, gpu_model, instance_type
ON CONFLICT (hour, kind, tier, gpu_model, instance_type)
DO UPDATE SET gpu_ms = r.gpu_ms + excluded.gpu_ms,
    quota_mib_ms = r.quota_mib_ms + excluded.quota_mib_ms,
    vm_ms = r.vm_ms + excluded.vm_ms,
    records = r.records + excluded.records`

// flushSQL moves every pending row into the hourly rollups. Rows committed while it runs are
// not visible to it and stay for the next flush; a row is deleted (and so added) exactly once.
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
