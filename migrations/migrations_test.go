package migrations_test

import (
	"database/sql"
	"os"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"

	"gpucloud/internal/pgtest"
	"gpucloud/migrations"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// A database migrated before a control-plane file was added below billing's range (here: it
// lacks 00004 and 00005 but has 00100) still migrates: the missing files are applied.
func TestMissingEarlierMigrationsApplied(t *testing.T) {
	db, err := sql.Open("pgx", pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := t.Context()
	for _, stmt := range []string{`DROP INDEX gpus_fit`, `DROP INDEX instances_gpu_server`,
		`DELETE FROM goose_db_version WHERE version_id IN (4, 5)`} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	if err := migrations.Up(ctx, db); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_indexes WHERE indexname IN ('gpus_fit', 'instances_gpu_server')`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("%d of the 2 indexes after Up", n)
	}
	if v, err := migrations.Version(ctx, db); err != nil || v < 100 {
		t.Fatalf("version %d %v", v, err)
	}
}
