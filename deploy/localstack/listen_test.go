package main

import (
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The apiserver comes back on the port it had last time, even when 8080 is free again or taken.
func TestAPIServerPortRemembered(t *testing.T) {
	t.Setenv("GPUCLOUD_APISERVER_ADDR", "")
	os.Unsetenv("GPUCLOUD_APISERVER_ADDR")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	remember := filepath.Join(t.TempDir(), "apiserver.addr")
	// A remembered address that is free is taken again.
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	want := probe.Addr().String()
	probe.Close()
	os.WriteFile(remember, []byte(want+"\n"), 0o644)
	ln, err := listenAPI(remember, log)
	if err != nil {
		t.Fatal(err)
	}
	if got := ln.Addr().String(); got != want {
		t.Fatalf("listened on %s, want the remembered %s", got, want)
	}
	// Taken by someone else: another address, remembered for next time.
	ln2, err := listenAPI(remember, log)
	if err != nil {
		t.Fatal(err)
	}
	defer ln2.Close()
	ln.Close()
	b, _ := os.ReadFile(remember)
	if strings.TrimSpace(string(b)) != ln2.Addr().String() || ln2.Addr().String() == want {
		t.Fatalf("remembered %q, listening on %s", b, ln2.Addr())
	}
}
