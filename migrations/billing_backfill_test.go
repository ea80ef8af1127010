package migrations_test

import (
	"database/sql"
	"testing"

	"gpucloud/internal/pgtest"
	"gpucloud/migrations"
)

// A database holding usage from before billing_usage_months and the fleet rollups (00620,
// 00621) gets both filled from it: rollups in the parent and in billing_usage_direct, and usage
// still waiting in billing_usage_pending.
func TestBillingUsageBackfilled(t *testing.T) {
	db, err := sql.Open("pgx", pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := t.Context()
	// Back to before 00620 (its and 00621's Down), then usage as the old code left it.
	for _, stmt := range []string{
		`DROP TABLE billing_usage_fleet_pending`, `DROP TABLE billing_usage_fleet`,
		`DROP INDEX billing_usage_direct_hour`, `CREATE INDEX billing_usage_direct_hour ON billing_usage_direct (hour)`,
		`CREATE INDEX billing_usage_direct_tenant ON billing_usage_direct (tenant_id, booked_period)`,
		`DROP TABLE billing_usage_months`,
		`DELETE FROM goose_db_version WHERE version_id IN (620, 621)`,
		`INSERT INTO billing_usage_hourly (tenant_id, booked_period, adjustment, hour, kind, tier, gpu_model, instance_type, gpu_ms, records)
		 VALUES ('00000000-0000-4000-8000-000000000001', '2026-03-01', false, '2026-03-02 10:00Z', 'gpu', 'dedicated', 'H100', '', 1000, 1),
		        ('00000000-0000-4000-8000-000000000001', '2026-04-01', true, '2026-03-31 23:00Z', 'gpu', 'dedicated', 'H100', '', 2000, 1)`,
		`INSERT INTO billing_usage_direct (tenant_id, booked_period, adjustment, hour, kind, tier, gpu_model, instance_type, gpu_ms, records)
		 VALUES ('00000000-0000-4000-8000-000000000002', '2026-03-01', false, '2026-03-02 10:00Z', 'gpu', 'dedicated', 'H100', '', 30000, 1)`,
		`INSERT INTO billing_usage_pending (tenant_id, booked_period, adjustment, hour, kind, tier, gpu_model, instance_type, gpu_ms, quota_mib_ms, vm_ms, records)
		 VALUES ('00000000-0000-4000-8000-000000000003', '2026-03-01', false, '2026-03-02 10:00Z', 'vm', '', '', 'g1', 0, 0, 400000, 1)`,
	} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	if err := migrations.Up(ctx, db); err != nil {
		t.Fatal(err)
	}
	var months string
	if err := db.QueryRowContext(ctx, `SELECT string_agg(right(tenant_id::text, 1) || ' ' || to_char(booked_period, 'YYYY-MM'), ', ' ORDER BY tenant_id, booked_period)
		FROM billing_usage_months`).Scan(&months); err != nil {
		t.Fatal(err)
	}
	if want := "1 2026-03, 1 2026-04, 2 2026-03, 3 2026-03"; months != want {
		t.Errorf("usage months %q, want %q", months, want)
	}
	var fleet string
	if err := db.QueryRowContext(ctx, `SELECT string_agg(concat_ws(' ', to_char(hour AT TIME ZONE 'UTC', 'DD HH24'), kind, gpu_ms, vm_ms, records), ', ' ORDER BY hour, kind)
		FROM billing_usage_fleet`).Scan(&fleet); err != nil {
		t.Fatal(err)
	}
	if want := "02 10 gpu 31000 0 2, 02 10 vm 0 400000 1, 31 23 gpu 2000 0 1"; fleet != want {
		t.Errorf("fleet rollups %q, want %q", fleet, want)
	}
}
