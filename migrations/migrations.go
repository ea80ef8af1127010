// Package migrations holds the platform's SQL schema as ordered goose migrations, embedded in the
// binaries that apply them ("apiserver migrate", the test harness).
//
// Files are named NNNNN_what.sql and are never edited once landed: a change is a new file.
// Number ranges keep parts apart: 00001-00099 control plane (apiserver), 00100-00199 billing.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"log/slog"

	"github.com/pressly/goose/v3"
)

//go:embed *.sql
var files embed.FS

// Up applies every migration not yet applied, in order.
func Up(ctx context.Context, db *sql.DB) error {
	// Parts number their migrations in their own ranges, so a database can already hold a later
	// range's files (00100 billing) when an earlier range gains one (00004): apply it anyway.
	p, err := goose.NewProvider(goose.DialectPostgres, db, files, goose.WithAllowOutofOrder(true))
	if err != nil {
		return fmt.Errorf("migrations: open provider: %w", err)
	}
	results, err := p.Up(ctx)
	if err != nil {
		return fmt.Errorf("migrations: up: %w", err)
	}
	for _, r := range results {
		slog.Debug("migration applied", "version", r.Source.Version, "file", r.Source.Path, "took", r.Duration)
	}
	return nil
}

// Version reports the highest applied migration.
func Version(ctx context.Context, db *sql.DB) (int64, error) {
	p, err := goose.NewProvider(goose.DialectPostgres, db, files)
	if err != nil {
		return 0, fmt.Errorf("migrations: open provider: %w", err)
	}
	return p.GetDBVersion(ctx)
}
