package main

import (
	"context"
	"flag"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFlagsAreChecked(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--id", "gs1", "--public-key", "short"}, "--public-key: want 32 bytes"},
		{[]string{"--public-key", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="}, "--id is required"},
		{[]string{"--id", "gs1", "--public-key", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", "--backend", "tpu"}, "want auto, cuda or simulated"},
		{[]string{"--id", "gs1", "--public-key", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", "--backend", "simulated", "--shm-session-mib", "8"}, "--shm-session-mib 8: want 16 to 16384"},
		{[]string{"--id", "gs1", "--public-key", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", "--backend", "simulated", "--shm-session-mib", "20000"}, "--shm-session-mib 20000: want 16 to 16384"},
		{[]string{"--id", "gs1", "--public-key", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", "--backend", "simulated", "--shm-total-mib", "1"}, "--shm-total-mib 1: below the smallest arena"},
		{[]string{"--shm-total-mib", "-1"}, "invalid value"},
		{[]string{"--id", "gs1", "--public-key", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", "--backend", "simulated", "--ivshmem-slots", "65"}, "--ivshmem-slots 65: want 0 (by the channel's size) to 64"},
		{[]string{"--id", "gs1", "--public-key", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", "--backend", "simulated", "--ivshmem-slots", "-1"}, "--ivshmem-slots -1: want 0"},
	}
	for _, tc := range cases {
		err := run(context.Background(), tc.args, slog.Default())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want %q", tc.args, err, tc.want)
		}
	}
}

func TestConfigFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpuserverd.conf")
	os.WriteFile(path, []byte("# comment\nid = gs-from-file\nlisten=:9999\n"), 0o600)
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	id := fs.String("id", "", "")
	listen := fs.String("listen", ":7070", "")
	fs.String("config", "", "")
	fs.Parse([]string{"--listen", ":1234"})
	if err := applyConfig(fs, path); err != nil {
		t.Fatal(err)
	}
	if *id != "gs-from-file" || *listen != ":1234" {
		t.Fatalf("id %q listen %q: the file fills unset flags, the command line wins", *id, *listen)
	}
	os.WriteFile(path, []byte("colour=blue\n"), 0o600)
	if err := applyConfig(fs, path); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("unknown key: %v", err)
	}
}

// Precedence: command line, then --config, then the environment, then the default.
func TestSettingsPrecedence(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpuserverd.conf")
	os.WriteFile(path, []byte("listen=:2222\n"), 0o600)
	t.Setenv("GPUSERVERD_LISTEN", ":3333")
	t.Setenv("GPUSERVERD_ADMIN", "127.0.0.1:4444")
	t.Setenv("GPUSERVERD_ID", "from-env")
	var s settings
	fs := newFlagSet(&s)
	if err := fs.Parse([]string{"--config", path, "--id", "from-flag"}); err != nil {
		t.Fatal(err)
	}
	if err := applyConfig(fs, s.config); err != nil {
		t.Fatal(err)
	}
	if s.id != "from-flag" || s.listen != ":2222" || s.admin != "127.0.0.1:4444" || s.dataDir != "/var/lib/gpuserverd" {
		t.Fatalf("got %+v", s)
	}
	t.Setenv("GPUSERVERD_CA_FILE", filepath.Join(t.TempDir(), "missing.pem"))
	err := run(context.Background(), []string{"--id", "g", "--public-key", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="}, slog.Default())
	if err == nil || !strings.Contains(err.Error(), "--ca-file") {
		t.Fatalf("a missing CA file: %v", err)
	}
}

// The admin port (every tenant's usage) listens on localhost unless told otherwise (issue 13,
// finding 7), and the pre-authentication and session limits have defaults.
func TestAdminDefaultsToLocalhost(t *testing.T) {
	t.Setenv("GPUSERVERD_ADMIN", "")
	os.Unsetenv("GPUSERVERD_ADMIN")
	var s settings
	fs := newFlagSet(&s)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if host, _, err := net.SplitHostPort(s.admin); err != nil || host != "127.0.0.1" {
		t.Fatalf("default --admin %q, want 127.0.0.1:<port>", s.admin)
	}
	if s.maxSessions < 1 || s.maxPerInstance < 1 || s.maxPending < 1 || s.maxPendingPerSource < 1 {
		t.Fatalf("limits without defaults: %+v", s)
	}
}
