// Package pgtest gives each test package a fresh, migrated PostgreSQL database on a real server.
//
// make test starts one ephemeral cluster and exports GPUCLOUD_TEST_PG_URL (a superuser URL); each
// package then creates its own databases there. Without it (a plain `go test ./pkg`), the package
// starts a private cluster in a temporary folder, which costs a couple of seconds.
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
//	func TestX(t *testing.T) { url := pgtest.NewDatabase(t) ... }
package pgtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"gpucloud/internal/pglocal"
	"gpucloud/migrations"
)

// EnvURL names the variable holding a superuser URL of a server that tests may create databases on.
const EnvURL = "GPUCLOUD_TEST_PG_URL"

var (
	adminURL string
	ready    bool // Main ran
	mu       sync.Mutex
	created  []string

	// The migrated template is made at the first NewDatabase, not in Main: a test process that
	// needs no database (go test -fuzz's workers for a parsing fuzz target) then starts at once.
	templateOnce sync.Once
	template     string
	templateErr  error
)

// Main prepares the server (the migrated template comes with the first NewDatabase), runs the
// tests, and cleans up.
func Main(m *testing.M) int {
	closeInheritedOnExec()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	var cluster *pglocal.Cluster
	adminURL = os.Getenv(EnvURL)
	if adminURL == "" {
		dir, err := os.MkdirTemp("", "pgtest-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
			return 1
		}
		defer os.RemoveAll(dir)
		cluster, err = pglocal.Start(ctx, dir, pglocal.Options{Ephemeral: true})
		if err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
			return 1
		}
		adminURL = cluster.URL("postgres")
		// Child test processes (go test -fuzz's workers run this Main too) use this cluster
		// rather than start their own, which nothing would stop when the coordinator kills them.
		os.Setenv(EnvURL, adminURL)
	}
	cancel()
	ready = true
	code := m.Run()

	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, name := range created {
		_ = exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	}
	if template != "" {
		_ = exec(ctx, "DROP DATABASE IF EXISTS "+template+" WITH (FORCE)")
	}
	if cluster != nil {
		_ = cluster.Stop(ctx)
	}
	return code
}

// NewDatabase creates a fresh database with every migration applied and returns its URL.
// It is dropped when the package's tests end.
func NewDatabase(tb testing.TB) string {
	tb.Helper()
	if !ready {
		tb.Fatal("pgtest: call pgtest.Main from TestMain first")
	}
	templateOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		name := "tmpl_" + randomSuffix()
		if templateErr = createDatabase(ctx, name, ""); templateErr == nil {
			templateErr = migrate(ctx, withDatabase(adminURL, name))
		}
		template = name // dropped at the end even if migrating it failed
	})
	if templateErr != nil {
		tb.Fatalf("pgtest: template: %v", templateErr)
	}
	name := "t_" + randomSuffix()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := createDatabase(ctx, name, template); err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	return withDatabase(adminURL, name)
}

// AdminURL is the superuser URL of the test server's maintenance database.
func AdminURL() string { return adminURL }

func createDatabase(ctx context.Context, name, fromTemplate string) error {
	stmt := "CREATE DATABASE " + name
	if fromTemplate != "" {
		stmt += " TEMPLATE " + fromTemplate
	}
	// Cloning a template fails while another session is connected to it; creates are serialised.
	mu.Lock()
	defer mu.Unlock()
	if err := exec(ctx, stmt); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	if fromTemplate != "" {
		created = append(created, name)
	}
	return nil
}

func migrate(ctx context.Context, dbURL string) error {
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := migrations.Up(ctx, db); err != nil {
		return err
	}
	return nil
}

func exec(ctx context.Context, stmt string) error {
	db, err := sql.Open("pgx", adminURL)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, stmt)
	return err
}

func withDatabase(raw, name string) string {
	u, err := url.Parse(raw)
	if err != nil {
		panic(fmt.Sprintf("pgtest: bad admin URL %q: %v", raw, err))
	}
	u.Path = "/" + name
	return u.String()
}

func randomSuffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// closeInheritedOnExec keeps the descriptors this test binary was handed (a fuzz worker's pipes
// to its coordinator, fds 3 and 4) out of the PostgreSQL it starts: Go marks its own descriptors
// close-on-exec but not inherited ones, and a postgres holding a dead worker's pipes made the
// fuzz coordinator wait for that worker until its timeout.
func closeInheritedOnExec() {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}
