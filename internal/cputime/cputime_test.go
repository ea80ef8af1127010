package cputime

import (
	"context"
	"database/sql"
	"os"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"gpucloud/internal/pglocal"
)

func TestSelfGrowsWithWork(t *testing.T) {
	before := Self()
	deadline := time.Now().Add(50 * time.Millisecond)
	x := 0
	for time.Now().Before(deadline) {
		x++
	}
	if after := Self(); after <= before {
		t.Fatalf("CPU time did not grow after busy work (%d iterations): %v -> %v", x, before, after)
	}
}

func TestPostgresServerCountsTheClusterWork(t *testing.T) {
	if PostgresServer("") != 0 || PostgresServer(t.TempDir()) != 0 {
		t.Fatal("a folder with no running server must read as 0")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "cputime-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	c, err := pglocal.Start(ctx, dir, pglocal.Options{Ephemeral: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop(context.Background()) //nolint:errcheck // best effort
	db, err := sql.Open("pgx", c.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	before := PostgresServer(c.DataDir())
	// Work the server does on the backend's CPU, not ours: a second of generate_series sums.
	if _, err := db.ExecContext(ctx, "SELECT sum(g) FROM generate_series(1, 20000000) g"); err != nil {
		t.Fatal(err)
	}
	if after := PostgresServer(c.DataDir()); after <= before {
		t.Fatalf("server CPU did not grow after a heavy query: %v -> %v", before, after)
	}
}
