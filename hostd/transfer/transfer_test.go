package transfer_test

import (
	"bytes"
	"context"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gpucloud/hostd/transfer"
)

const secret = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// A move's files go to the peer holding its secret, only them, and only while offered; a copy
// lands whole or not at all.
func TestOfferFetchRetain(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	disk := filepath.Join(dir, "disk.qcow2")
	data := bytes.Repeat([]byte("gpucloud"), 100000)
	if err := os.WriteFile(disk, data, 0o600); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "secret-of-another-vm")
	os.WriteFile(other, []byte("not yours"), 0o600)
	var ex transfer.Exports
	ex.Offer("m1", secret, map[string]string{"disk": disk})
	ex.Offer("m2", strings.Repeat("f", 64), map[string]string{"disk": other})
	srv := httptest.NewServer(ex.Handler())
	defer srv.Close()
	ep := strings.TrimPrefix(srv.URL, "http://")
	var c transfer.Client

	m, err := c.Manifest(ctx, ep, "m1", secret)
	if err != nil || len(m.Files) != 1 || m.Files[0] != (transfer.File{Name: "disk", Size: int64(len(data))}) || m.Total() != int64(len(data)) {
		t.Fatalf("manifest %+v %v", m, err)
	}
	dst := filepath.Join(t.TempDir(), "in", "disk.qcow2")
	var seen int64
	if err := c.Fetch(ctx, ep, "m1", secret, m.Files[0], dst, func(n int64) { seen = n }); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(dst); !bytes.Equal(got, data) || seen != int64(len(data)) {
		t.Fatalf("fetched %d bytes (progress %d), want %d", len(got), seen, len(data))
	}
	// Wrong secret, another move's secret, an unknown file: all 404, nothing learnt.
	for _, try := range []struct{ move, secret, file string }{{"m1", strings.Repeat("0", 64), "disk"}, {"m1", "", "disk"},
		{"m2", secret, "disk"}, {"m1", secret, "../secret-of-another-vm"}, {"m1", secret, "volume-x"}} {
		err := c.Fetch(ctx, ep, try.move, try.secret, transfer.File{Name: try.file, Size: 9}, filepath.Join(t.TempDir(), "x"), nil)
		if err == nil || !strings.Contains(err.Error(), "HTTP 404") {
			t.Fatalf("fetch %+v: %v", try, err)
		}
	}
	// A manifest that promises more than the source sends: the copy fails and leaves nothing.
	short := filepath.Join(t.TempDir(), "short")
	err = c.Fetch(ctx, ep, "m1", secret, transfer.File{Name: "disk", Size: int64(len(data)) + 1}, short, nil)
	if !errors.Is(err, transfer.ErrShort) {
		t.Fatalf("short copy: %v", err)
	}
	if _, err := os.Stat(short); !os.IsNotExist(err) {
		t.Fatalf("a short copy left %s: %v", short, err)
	}
	if _, err := os.Stat(short + ".part"); !os.IsNotExist(err) {
		t.Fatalf("a short copy left its part file: %v", err)
	}
	// Withdrawn: the move finished.
	ex.Retain(map[string]bool{"m2": true})
	if _, err := c.Manifest(ctx, ep, "m1", secret); err == nil || !strings.Contains(err.Error(), "HTTP 404") {
		t.Fatalf("manifest of a withdrawn move: %v", err)
	}
	if _, err := c.Manifest(ctx, "evil.example/x?", "m1", secret); err == nil {
		t.Fatal("an endpoint with a path was dialled")
	}
}
