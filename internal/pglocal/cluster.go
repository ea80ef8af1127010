// Package pglocal runs a private PostgreSQL cluster in a folder: the local stack's database when no
// URL is configured, and the test suites' database server. It uses the server binaries installed on
// the machine (Debian's postgresql package) and never downloads anything.
package pglocal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Options tune a cluster. The zero value is a durable cluster for the local stack.
type Options struct {
	// Ephemeral trades durability for speed (fsync off): right for tests, wrong for real data.
	Ephemeral bool
	// MaxConnections defaults to 300, enough for the load benchmark and the placement race test.
	MaxConnections int
	Logger         *slog.Logger
}

// Cluster is a running PostgreSQL server owned by this process.
type Cluster struct {
	Dir  string // holds pgdata/ and postgres.log
	Port int

	bin    string // folder of initdb, pg_ctl, postgres
	runAs  string // OS user to run the server as ("" = current user)
	logger *slog.Logger
}

// URL is the superuser connection string for database name.
func (c *Cluster) URL(database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.Port, database)
}

// DataDir is the server's data folder (what pg_ctl -D names).
func (c *Cluster) DataDir() string { return filepath.Join(c.Dir, "pgdata") }

// Start initialises dir (once) and starts the server on a free loopback port.
func Start(ctx context.Context, dir string, opts Options) (*Cluster, error) {
	bin, err := findBinaries()
	if err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxConnections == 0 {
		opts.MaxConnections = 300
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("pglocal: resolve %s: %w", dir, err)
	}
	c := &Cluster{Dir: abs, bin: bin, logger: opts.Logger}
	// PostgreSQL refuses to run as root; on root machines (CI, containers) it runs as "postgres".
	if os.Geteuid() == 0 {
		c.runAs = "postgres"
	}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("pglocal: create %s: %w", c.Dir, err)
	}
	if err := c.chownToServerUser(c.Dir); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(c.DataDir(), "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		if err := c.initdb(ctx); err != nil {
			return nil, err
		}
	}
	// A server left behind by a killed run holds the data folder: stop it before starting anew.
	if _, err := os.Stat(filepath.Join(c.DataDir(), "postmaster.pid")); err == nil {
		_ = c.pgctl(ctx, "stop", "-D", c.DataDir(), "-m", "immediate", "-w")
		_ = os.Remove(filepath.Join(c.DataDir(), "postmaster.pid"))
	}
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		c.Port = port
		opt := []string{
			"-p", strconv.Itoa(port),
			"-c", "listen_addresses=127.0.0.1",
			"-c", "unix_socket_directories=",
			"-c", "max_connections=" + strconv.Itoa(opts.MaxConnections),
		}
		if opts.Ephemeral {
			opt = append(opt, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
		}
		err = c.pgctl(ctx, "start", "-w", "-t", "60", "-D", c.DataDir(),
			"-l", filepath.Join(c.Dir, "postgres.log"), "-o", strings.Join(opt, " "))
		if err == nil {
			c.logger.Info("postgres started", "dir", c.Dir, "port", c.Port)
			return c, nil
		}
		// Another process may have taken the port between our probe and the server's bind.
		c.logger.Warn("postgres start failed, retrying on another port", "port", port, "err", err)
	}
	return nil, fmt.Errorf("pglocal: postgres did not start; see %s", filepath.Join(c.Dir, "postgres.log"))
}

// Stop shuts the server down, waiting for it to finish.
func (c *Cluster) Stop(ctx context.Context) error {
	if err := c.pgctl(ctx, "stop", "-D", c.DataDir(), "-m", "fast", "-w"); err != nil {
		return fmt.Errorf("pglocal: stop: %w", err)
	}
	c.logger.Info("postgres stopped", "dir", c.Dir)
	return nil
}

func (c *Cluster) initdb(ctx context.Context) error {
	err := c.command(ctx, filepath.Join(c.bin, "initdb"), "-D", c.DataDir(), "-U", "postgres",
		"-A", "trust", "-E", "UTF8", "--no-sync", "--locale=C").Run()
	if err != nil {
		return fmt.Errorf("pglocal: initdb %s: %w", c.DataDir(), err)
	}
	return nil
}

func (c *Cluster) pgctl(ctx context.Context, args ...string) error {
	cmd := c.command(ctx, filepath.Join(c.bin, "pg_ctl"), args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl %s: %w: %s", args[0], err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (c *Cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	if c.runAs != "" {
		return exec.CommandContext(ctx, "runuser", append([]string{"-u", c.runAs, "--", name}, args...)...)
	}
	return exec.CommandContext(ctx, name, args...)
}

func (c *Cluster) chownToServerUser(dir string) error {
	if c.runAs == "" {
		return nil
	}
	u, err := user.Lookup(c.runAs)
	if err != nil {
		return fmt.Errorf("pglocal: running as root needs the %q OS user (install postgresql): %w", c.runAs, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return fmt.Errorf("pglocal: chown %s: %w", dir, err)
	}
	return nil
}

// findBinaries locates initdb and pg_ctl: on PATH first, then Debian's versioned folders.
func findBinaries() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if _, err := exec.LookPath("pg_ctl"); err == nil {
			return filepath.Dir(p), nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("pglocal: PostgreSQL server binaries not found (apt-get install postgresql)")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pglocal: find free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// WaitReady polls until the server accepts TCP connections or ctx ends.
func (c *Cluster) WaitReady(ctx context.Context) error {
	for {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", c.Port), time.Second)
		if err == nil {
			conn.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pglocal: wait ready: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
