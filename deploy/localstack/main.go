// Command localstack runs the whole platform on one machine: a private PostgreSQL in .data/ (or
// the database at GPUCLOUD_DATABASE_URL), migrated, then the platform's services on embedded
// defaults where hardware is missing. Ctrl-C stops everything cleanly.
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"gpucloud/internal/pglocal"
	"gpucloud/migrations"
)

func main() {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	slog.SetDefault(logger)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, logger)
	if stopped := ctx.Err() != nil; stopped && (err == nil || errors.Is(err, context.Canceled)) {
		// Ctrl-C is how the stack is meant to end: a clean exit, so `make run` reports no error.
		logger.Info("local stack stopped")
		return
	}
	if err != nil {
		logger.Error("localstack failed", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, logger *slog.Logger) error {
	ctx, stop := context.WithCancel(ctx) // a daemon that dies stops the stack too
	defer stop()
	dbURL := os.Getenv("GPUCLOUD_DATABASE_URL")
	if dbURL == "" {
		cluster, err := pglocal.Start(ctx, filepath.Join(dataDir(), "pg"), pglocal.Options{Logger: logger})
		if err != nil {
			return err
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = cluster.Stop(sctx)
		}()
		if err := ensureDatabase(ctx, cluster.URL("postgres"), "gpucloud"); err != nil {
			return err
		}
		dbURL = cluster.URL("gpucloud")
	}
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		return fmt.Errorf("open database: %w", err)
	}
	defer db.Close()
	if err := migrations.Up(ctx, db); err != nil {
		return err
	}
	apiURL, keys, apiDone, err := startAPIServer(ctx, dbURL, logger)
	if err != nil {
		return err
	}
	d, err := startDaemons(ctx, dbURL, apiURL, logger)
	if err != nil {
		return err
	}
	defer d.stop(logger)
	fmt.Printf("\ngpucloud local stack is up\n  database:  %s\n  apiserver: %s  (OpenAPI: %s/v1/openapi.json)\n"+
		"  operator key:           %s\n  demo tenant admin key:  %s\n  finance key:            %s\n"+
		"  (keys are kept in %s/demo-keys.json and finance-key.json)\n"+
		"  gpuctl as the demo tenant:\n    gpuctl config set-profile demo --endpoint %s --api-key %s --use\n",
		dbURL, apiURL, apiURL, keys.OperatorKey, keys.TenantKey, keys.FinanceKey, dataDir(), apiURL, keys.TenantKey)
	printPasswords(apiURL, keys.Passwords)
	d.print()
	fmt.Printf("  press Ctrl-C to stop\n\n")
	select {
	case <-ctx.Done():
	case err := <-apiDone:
		return err
	case err := <-d.exited():
		logger.Error("a daemon stopped; stopping the stack", "err", err)
	}
	logger.Info("shutting down")
	d.stop(logger)
	stop()
	return <-apiDone
}

func ensureDatabase(ctx context.Context, adminURL, name string) error {
	db, err := sql.Open("pgx", adminURL)
	if err != nil {
		return fmt.Errorf("open admin database: %w", err)
	}
	defer db.Close()
	var exists bool
	if err := db.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return fmt.Errorf("look up database %s: %w", name, err)
	}
	if !exists {
		if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
			return fmt.Errorf("create database %s: %w", name, err)
		}
	}
	return nil
}
