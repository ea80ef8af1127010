package images

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

func sum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func TestFetchVerifyAndCache(t *testing.T) {
	good, bad := []byte("qcow2 bytes of the image"), []byte("tampered bytes")
	var served atomic.Int32
	var body atomic.Value
	body.Store(good)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		if r.URL.Path != "/img.qcow2" {
			http.NotFound(w, r)
			return
		}
		w.Write(body.Load().([]byte))
	}))
	defer srv.Close()
	c := &Cache{Dir: t.TempDir()}
	ctx := t.Context()

	path, err := c.Ensure(ctx, "ubuntu", srv.URL+"/img.qcow2", sum(good))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); string(got) != string(good) {
		t.Fatalf("cached %q", got)
	}
	// Cached: no second fetch.
	if _, err := c.Ensure(ctx, "ubuntu", srv.URL+"/img.qcow2", sum(good)); err != nil || served.Load() != 1 {
		t.Fatalf("second ensure: %v, %d fetches", err, served.Load())
	}
	// A source serving other bytes is refused and leaves nothing behind.
	body.Store(bad)
	_, err = c.Ensure(ctx, "other", srv.URL+"/img.qcow2", sum(good))
	if err == nil || !strings.Contains(err.Error(), "checksum mismatch") {
		t.Fatalf("tampered image: %v", err)
	}
	if _, err := os.Stat(c.Path("other")); err == nil {
		t.Fatal("a tampered image was cached")
	}
	entries, _ := os.ReadDir(c.Dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".fetch-") {
			t.Fatalf("temporary file left: %s", e.Name())
		}
	}
	// A new checksum for the same name fetches again.
	if _, err := c.Ensure(ctx, "ubuntu", srv.URL+"/img.qcow2", sum(bad)); err != nil || served.Load() != 3 {
		t.Fatalf("re-registered image: %v, %d fetches", err, served.Load())
	}
	if _, err := c.Ensure(ctx, "x", srv.URL+"/missing", sum(good)); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("missing source: %v", err)
	}
}

func TestFileSourceAndAdoption(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src.qcow2")
	data := []byte("local image")
	os.WriteFile(src, data, 0o644)
	c := &Cache{Dir: filepath.Join(dir, "cache")}
	path, err := c.Ensure(t.Context(), "local", "file://"+src, sum(data))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); string(got) != string(data) {
		t.Fatalf("copied %q", got)
	}
	// The source is the cached file itself: adopted, not fetched over.
	self := &Cache{Dir: dir}
	if p, err := self.Ensure(t.Context(), "src", "file://"+src, sum(data)); err != nil || p != src {
		t.Fatalf("adopt: %s %v", p, err)
	}
	for _, bad := range []string{"file://relative", "ftp://h/x", "file://host/x"} {
		if _, err := c.Ensure(t.Context(), "bad", bad, sum(data)); err == nil {
			t.Errorf("source %q accepted", bad)
		}
	}
}
