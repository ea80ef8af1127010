package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"gpucloud/internal/pglocal"
)

// startCluster starts the private cluster in dir; with settings (name=value,...) it writes them
// with ALTER SYSTEM and restarts the server, so settings that need a restart (shared_buffers,
// wal_buffers) take effect too. The settings are printed: a number is only comparable with the
// server settings it ran under.
func startCluster(ctx context.Context, dir string, ephemeral bool, settings string) (*pglocal.Cluster, error) {
	opts := pglocal.Options{Ephemeral: ephemeral}
	cluster, err := pglocal.Start(ctx, dir, opts)
	if err != nil || settings == "" {
		return cluster, err
	}
	conn, err := pgx.Connect(ctx, cluster.URL("postgres"))
	if err != nil {
		return nil, fmt.Errorf("connect to set -pg-conf: %w", err)
	}
	defer conn.Close(ctx)
	for _, kv := range strings.Split(settings, ",") {
		name, value, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("-pg-conf: %q is not name=value", kv)
		}
		// ALTER SYSTEM takes no parameters; the name is an identifier, the value a literal.
		stmt := "ALTER SYSTEM SET " + pgx.Identifier{name}.Sanitize() + " = '" + strings.ReplaceAll(value, "'", "''") + "'"
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return nil, fmt.Errorf("-pg-conf %s: %w", kv, err)
		}
	}
	if err := cluster.Stop(ctx); err != nil {
		return nil, err
	}
	fmt.Printf("server settings: %s\n", settings)
	return pglocal.Start(ctx, dir, opts)
}
