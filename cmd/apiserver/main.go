// Command apiserver is the control plane: "serve" runs the REST API, "migrate" applies the
// database migrations, "bootstrap" creates the first operator and prints its API key once.
package main

// docs/configuration.md is generated from the flags.
//go:generate env GPUCLOUD_UPDATE_DOCS=1 go test -count=1 -run ^TestConfigurationDoc$ .

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"database/sql"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/spf13/cobra"

	"gpucloud/apiserver/app"
	"gpucloud/apiserver/server"
	"gpucloud/apiserver/store"
	"gpucloud/internal/authn"
	"gpucloud/internal/httplimits"
	"gpucloud/internal/tlsconf"
	"gpucloud/migrations"
)

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func main() {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRoot(ctx).ExecuteContext(ctx); err != nil {
		os.Exit(1)
	}
}

// newRoot builds the command tree; its flags' defaults read the environment now (and
// docs/configuration.md is generated from them).
func newRoot(ctx context.Context) *cobra.Command {
	var dbURL string
	root := &cobra.Command{Use: "apiserver", Short: "gpucloud control plane", SilenceUsage: true}
	root.PersistentFlags().StringVar(&dbURL, "database-url", env("GPUCLOUD_DATABASE_URL", ""), "PostgreSQL URL (env GPUCLOUD_DATABASE_URL)")

	var listen, keyFile, tlsCert, tlsKey string
	var genKey bool
	var maxConns int32
	var limits httplimits.Limits
	var proxies []string
	var metricsTokenFile string
	var webhooksPrivate bool
	var console server.ConsoleLimits
	var consoleCA string
	serve := &cobra.Command{Use: "serve", Short: "Serve the REST API", RunE: func(cmd *cobra.Command, _ []string) error {
		if dbURL == "" {
			return fmt.Errorf("--database-url (or GPUCLOUD_DATABASE_URL) is required")
		}
		load := app.LoadTokenKey
		if genKey {
			load = app.LoadOrCreateTokenKey
		}
		key, err := load(keyFile)
		if err != nil {
			return err
		}
		metricsToken, err := app.LoadMetricsToken(metricsTokenFile)
		if err != nil {
			return err
		}
		st, err := store.Open(ctx, dbURL, maxConns)
		if err != nil {
			return err
		}
		defer st.Close()
		ln, err := net.Listen("tcp", listen)
		if err != nil {
			return fmt.Errorf("listen %s: %w", listen, err)
		}
		if ln, err = tlsconf.Listen(ln, tlsCert, tlsKey); err != nil {
			return fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		if consoleCA != "" {
			pool, err := tlsconf.Pool(consoleCA)
			if err != nil {
				return fmt.Errorf("--console-ca-file: %w", err)
			}
			console.HostTLS = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		}
		slog.Info("apiserver listening", "addr", ln.Addr().String(), "tls", tlsCert != "")
		return app.Serve(ctx, app.Config{Listener: ln, Store: st, TokenKey: key, Logger: slog.Default(), HTTP: limits,
			Options: server.Options{TrustedProxies: proxies, MetricsToken: metricsToken, Console: console},
			Billing: app.BillingConfig{WebhooksAllowPrivate: webhooksPrivate}})
	}}
	serve.Flags().StringVar(&listen, "listen", env("GPUCLOUD_LISTEN", ":8080"), "address to listen on (env GPUCLOUD_LISTEN)")
	serve.Flags().StringVar(&keyFile, "token-key", env("GPUCLOUD_TOKEN_KEY_FILE", ".data/token.key"), "Ed25519 session token key file (env GPUCLOUD_TOKEN_KEY_FILE)")
	serve.Flags().BoolVar(&genKey, "generate-token-key", false, "create the token key file if it is missing (development)")
	serve.Flags().StringVar(&tlsCert, "tls-cert", env("GPUCLOUD_TLS_CERT_FILE", ""), "serve HTTPS with this PEM certificate chain, reloaded when it changes (env GPUCLOUD_TLS_CERT_FILE)")
	serve.Flags().StringVar(&tlsKey, "tls-key", env("GPUCLOUD_TLS_KEY_FILE", ""), "PEM private key of --tls-cert (env GPUCLOUD_TLS_KEY_FILE)")
	serve.Flags().Int32Var(&maxConns, "max-db-conns", 0, "database connection pool size (0: store.DefaultMaxConns)")
	serve.Flags().StringVar(&metricsTokenFile, "metrics-token-file", env("GPUCLOUD_METRICS_TOKEN_FILE", ""), "file holding the bearer token Prometheus reads /metrics with; operators' API keys read it too (env GPUCLOUD_METRICS_TOKEN_FILE)")
	serve.Flags().StringSliceVar(&proxies, "trusted-proxies", nil, "addresses or CIDRs of reverse proxies whose X-Forwarded-For names the client, for per-address sign-in throttling (default: none, the header is ignored)")
	d := httplimits.Default
	serve.Flags().DurationVar(&limits.ReadHeaderTimeout, "read-header-timeout", d.ReadHeaderTimeout, "longest a client may take to send a request's line and headers")
	serve.Flags().DurationVar(&limits.ReadTimeout, "read-timeout", d.ReadTimeout, "longest a client may take to send a whole request, body included; a slower one is cut off")
	serve.Flags().DurationVar(&limits.IdleTimeout, "idle-timeout", d.IdleTimeout, "close a keep-alive connection idle this long")
	serve.Flags().IntVar(&limits.MaxHeaderBytes, "max-header-bytes", d.MaxHeaderBytes, "largest request line and headers, in bytes")
	serve.Flags().IntVar(&limits.MaxConns, "max-conns", 0, "connections served at once; more wait in the listen backlog (0: half the process's open-file limit, at most 100000)")
	serve.Flags().IntVar(&console.MaxSessions, "console-max-sessions", 64, "interactive serial consoles open at once on this apiserver (hosts allow one per instance)")
	serve.Flags().DurationVar(&console.Idle, "console-idle", 15*time.Minute, "close an interactive console with no traffic either way for this long")
	serve.Flags().DurationVar(&console.MaxDuration, "console-max-duration", 8*time.Hour, "close an interactive console after this long, busy or not")
	serve.Flags().IntVar(&console.MaxFrame, "console-max-frame", 16<<10, "largest WebSocket frame a console user may send, in bytes")
	serve.Flags().StringVar(&consoleCA, "console-ca-file", env("GPUCLOUD_CONSOLE_CA_FILE", ""), "PEM CA certificates that hosts' wss:// console endpoints are verified with instead of the system roots (env GPUCLOUD_CONSOLE_CA_FILE)")
	serve.Flags().BoolVar(&webhooksPrivate, "webhooks-allow-private", env("GPUCLOUD_WEBHOOKS_ALLOW_PRIVATE", "") == "true",
		"let webhook deliveries reach loopback and private addresses (development; env GPUCLOUD_WEBHOOKS_ALLOW_PRIVATE=true)")

	migrate := &cobra.Command{Use: "migrate", Short: "Apply database migrations", RunE: func(cmd *cobra.Command, _ []string) error {
		if dbURL == "" {
			return fmt.Errorf("--database-url (or GPUCLOUD_DATABASE_URL) is required")
		}
		db, err := sql.Open("pgx", dbURL)
		if err != nil {
			return fmt.Errorf("open database: %w", err)
		}
		defer db.Close()
		if err := migrations.Up(ctx, db); err != nil {
			return err
		}
		v, err := migrations.Version(ctx, db)
		if err != nil {
			return err
		}
		fmt.Printf("database at migration %d\n", v)
		return nil
	}}

	var email, role string
	bootstrap := &cobra.Command{Use: "bootstrap", Short: "Create a platform user and print its API key once", RunE: func(cmd *cobra.Command, _ []string) error {
		if dbURL == "" {
			return fmt.Errorf("--database-url (or GPUCLOUD_DATABASE_URL) is required")
		}
		r := authn.Role(role)
		if r != authn.RoleOperator && r != authn.RoleFinance {
			return fmt.Errorf("--role must be operator or finance, not %q", role)
		}
		st, err := store.Open(ctx, dbURL, 2)
		if err != nil {
			return err
		}
		defer st.Close()
		u, secret, err := app.Bootstrap(ctx, st, email, r)
		if err != nil {
			return err
		}
		fmt.Printf("user %s (%s, %s)\napi key (shown once): %s\n", u.ID, u.Email, u.Role, secret)
		return nil
	}}
	bootstrap.Flags().StringVar(&email, "email", "", "e-mail of the user")
	bootstrap.Flags().StringVar(&role, "role", "operator", "operator or finance")
	_ = bootstrap.MarkFlagRequired("email")

	// gpuserverd verifies session tokens offline with the public half of the token key.
	pubKey := &cobra.Command{Use: "token-public-key", Short: "Print the session-token public key, base64, for gpuserverd's --public-key",
		Args: cobra.NoArgs, RunE: func(cmd *cobra.Command, _ []string) error {
			key, err := app.LoadTokenKey(keyFile)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), base64.StdEncoding.EncodeToString(key.Public().(ed25519.PublicKey)))
			return nil
		}}
	pubKey.Flags().StringVar(&keyFile, "token-key", env("GPUCLOUD_TOKEN_KEY_FILE", ".data/token.key"), "Ed25519 session token key file (env GPUCLOUD_TOKEN_KEY_FILE)")

	root.AddCommand(serve, migrate, bootstrap, pubKey)
	return root
}
