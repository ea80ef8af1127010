package manifests

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"gpucloud/apiserver/app"
	"gpucloud/apiserver/store"
	"gpucloud/sdk"
)

// poll calls cond every 20 ms, at most 250 times (5 s), and reports whether it became true.
func poll(cond func() bool) bool {
	for range 250 {
		if cond() {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// status is what the replica at url answers GET /v1/me with key.
func status(t *testing.T, url, key string) int {
	t.Helper()
	_, err := sdkClient(t, url, key).Me(t.Context())
	var ae *sdk.APIError
	switch {
	case err == nil:
		return http.StatusOK
	case errors.As(err, &ae):
		return ae.Status
	default:
		t.Fatalf("GET /v1/me on %s: %v", url, err)
		return 0
	}
}

// TestKeyRevocationReachesEveryReplica: a key cached on replica B and revoked through replica A
// is refused by B as soon as A's NOTIFY arrives, not after the cache's lifetime; and B, its
// listener killed, serves every key from the database until the listener is back.
func TestKeyRevocationReachesEveryReplica(t *testing.T) {
	ctx := context.Background()
	rs := startReplicas(t, 2)
	a, b := rs[0], rs[1]
	for i, r := range rs {
		if !poll(r.st.KeyCacheLive) {
			t.Fatalf("replica %d: credentials listener never connected", i)
		}
	}
	_, admin, adminKey, err := app.TenantWithAdmin(ctx, a.st, store.Tenant{Name: "t", QuotaInstances: 1}, "admin@t.example")
	if err != nil {
		t.Fatal(err)
	}
	k, err := sdkClient(t, a.url, adminKey).CreateAPIKey(ctx, admin.ID.String(), "ci")
	if err != nil {
		t.Fatal(err)
	}

	// 1. Used on B, so cached there; revoked through A; B refuses it once notified.
	use(t, b, k.Secret, http.StatusOK, 1, "fresh key on B")
	if err := sdkClient(t, a.url, adminKey).RevokeAPIKey(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	if !poll(func() bool { return b.st.KeyCacheSize() == 0 }) {
		t.Fatal("B never received the revocation's notification")
	}
	if s := status(t, b.url, k.Secret); s != http.StatusUnauthorized {
		t.Fatalf("revoked key on B: %d, want 401", s)
	}
	if s := status(t, b.url, adminKey); s != http.StatusOK {
		t.Fatalf("another key of the same user on B after the revocation: %d", s)
	}

	// 2. B's listener killed while the database takes no new connections (the pools keep the
	// ones they hold): B serves keys from the database only, so a revocation it cannot hear
	// about still counts; once the listener is back, B caches again.
	for _, r := range rs {
		warm(t, r.st, 4)
	}
	var dbname string
	if err := a.st.Pool.QueryRow(ctx, `SELECT current_database()`).Scan(&dbname); err != nil {
		t.Fatal(err)
	}
	// A database cannot refuse connections from inside itself: ask from the maintenance one.
	mcfg := a.st.Pool.Config().ConnConfig.Copy()
	mcfg.Database = "postgres"
	maint, err := pgx.ConnectConfig(ctx, mcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { maint.Close(ctx) }) // after the cleanup below that re-allows connections
	allow := func(on bool) {
		if _, err := maint.Exec(ctx, fmt.Sprintf(`ALTER DATABASE %q WITH ALLOW_CONNECTIONS %t`, dbname, on)); err != nil {
			t.Fatalf("allow connections %t: %v", on, err)
		}
	}
	allow(false)
	t.Cleanup(func() { allow(true) }) // harmless twice; lets the replicas' shutdown connect
	pid := b.st.ListenerPID()
	if pid == 0 || pid == a.st.ListenerPID() {
		t.Fatalf("listener pids: A %d, B %d", a.st.ListenerPID(), pid)
	}
	var killed bool
	if err := a.st.Pool.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, int32(pid)).Scan(&killed); err != nil || !killed {
		t.Fatalf("terminate B's listener (pid %d): %v %v", pid, killed, err)
	}
	if !poll(func() bool { return !b.st.KeyCacheLive() }) {
		t.Fatal("B kept its key cache on with its listener gone")
	}
	if g := gauge(t, b.url, "apiserver_key_cache_listener_up"); g != "0" {
		t.Fatalf("listener gauge on B while disconnected: %q, want 0", g)
	}
	k2, err := sdkClient(t, a.url, adminKey).CreateAPIKey(ctx, admin.ID.String(), "ci-2")
	if err != nil {
		t.Fatal(err)
	}
	use(t, b, k2.Secret, http.StatusOK, 0, "key on B while its listener is down")
	if err := sdkClient(t, a.url, adminKey).RevokeAPIKey(ctx, k2.ID); err != nil {
		t.Fatal(err)
	}
	if s := status(t, b.url, k2.Secret); s != http.StatusUnauthorized {
		t.Fatalf("key revoked while B's listener was down, on B: %d, want 401", s)
	}
	if g := gauge(t, a.url, "apiserver_key_cache_listener_up"); g != "1" {
		t.Fatalf("A's listener gauge: %q, want 1 (A's listener was never touched)", g)
	}

	allow(true)
	if !poll(b.st.KeyCacheLive) {
		t.Fatal("B's listener never reconnected")
	}
	if b.st.ListenerPID() == pid {
		t.Fatal("B reports the killed listener's pid")
	}
	if g := gauge(t, b.url, "apiserver_key_cache_listener_up"); g != "1" {
		t.Fatalf("listener gauge on B after reconnecting: %q, want 1", g)
	}
	use(t, b, adminKey, http.StatusOK, 1, "admin key on B after reconnecting")
}

// use calls GET /v1/me on r with key and checks the answer and how many keys r caches after it.
func use(t *testing.T, r replica, key string, want, cached int, what string) {
	t.Helper()
	if s := status(t, r.url, key); s != want {
		t.Fatalf("%s: %d, want %d", what, s, want)
	}
	if n := r.st.KeyCacheSize(); n != cached {
		t.Fatalf("%s: %d keys cached, want %d", what, n, cached)
	}
}

// warm makes st's pool hold n open connections, so that requests go on while the database
// refuses new ones.
func warm(t *testing.T, st *store.Store, n int) {
	t.Helper()
	var conns []*pgxpool.Conn
	for range n {
		c, err := st.Pool.Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
}

// gauge reads one unlabelled metric's value from the replica's /metrics.
func gauge(t *testing.T, url, name string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+metricsToken) // no database needed, unlike an API key
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	t.Fatalf("%s: no %s in /metrics (status %d)", url, name, resp.StatusCode)
	return ""
}
