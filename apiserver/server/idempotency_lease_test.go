package server_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"gpucloud/apiserver/server"
)

// writerFunc is an io.Writer made of a function.
type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// An apiserver killed while it serves a POST leaves the request's Idempotency-Key claimed, and
// nothing renews the claim's lease any more: the client's retry with the same key, once the lease
// ran out, takes the claim over and runs the request (before, it was told "still being served"
// for ever: the chaos test's uncordon, retried across an apiserver kill, never went through).
// While the claim is renewed a retry is told to wait, and a claimer that comes back after its
// claim was taken over does not replace the answer of the request that took it.
func TestIdempotencyClaimOfADeadServerIsTakenOver(t *testing.T) {
	var calls atomic.Int32
	release := make(chan struct{})
	notKept := make(chan struct{}, 1) // the server logs that an answer came too late to be kept
	logs := writerFunc(func(p []byte) (int, error) {
		if bytes.Contains(p, []byte("this answer is not kept")) {
			select {
			case notKept <- struct{}{}:
			default:
			}
		}
		return len(p), nil
	})
	e := newEnv(t, envOpts{opts: server.Options{IdempotencyLease: time.Hour, Logger: slog.New(slog.NewTextHandler(logs, nil))},
		mounts: []server.Mount{func(v1 *gin.RouterGroup) {
			v1.POST("/once", func(c *gin.Context) {
				n := calls.Add(1)
				if n == 1 { // the first attempt is served by the apiserver that dies
					<-release
				}
				c.JSON(http.StatusOK, gin.H{"run": n})
			})
		}}})
	var releaseOnce sync.Once
	letGo := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(letGo) // before the test server's close, which waits for the handler
	send := func(ctx context.Context) (int, string, error) {
		req, _ := http.NewRequestWithContext(ctx, "POST", e.url+"/v1/once", strings.NewReader(`{"what":"uncordon"}`))
		req.Header.Set("Authorization", "Bearer "+e.tenantA.Key)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "k-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	wait := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not after 10 s", what)
			}
		}
	}

	first, cancelFirst := context.WithCancel(context.Background())
	defer cancelFirst()
	go send(first)
	wait("the first attempt is served", func() bool { return calls.Load() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if status, body, err := send(ctx); status != http.StatusConflict || !strings.Contains(body, "idempotency-in-progress") {
		t.Fatalf("a retry while the claim is renewed: %d %s %v, want 409 idempotency-in-progress", status, body, err)
	}

	// The first attempt's apiserver dies: its lease is renewed no more, and runs out.
	if _, err := e.st.Pool.Exec(ctx, `UPDATE idempotency_keys SET lease_until = now() - interval '1 second' WHERE key = 'k-1'`); err != nil {
		t.Fatal(err)
	}
	if status, body, err := send(ctx); status != http.StatusOK || !strings.Contains(body, `"run":2`) || calls.Load() != 2 {
		t.Fatalf("a retry after the claim's lease ran out: %d %s %v (%d runs), want the request run again", status, body, err, calls.Load())
	}

	// The dead apiserver's request comes back: its answer does not replace the one stored.
	letGo()
	select {
	case <-notKept:
	case <-time.After(10 * time.Second):
		t.Fatal("the first attempt's late answer: not refused after 10 s")
	}
	if status, body, err := send(ctx); status != http.StatusOK || !strings.Contains(body, `"run":2`) || calls.Load() != 2 {
		t.Fatalf("a repeat after both ran: %d %s %v (%d runs), want the taken-over run's answer replayed", status, body, err, calls.Load())
	}
}

// A claim's lease is renewed while its request runs, however long: a retry after several leases'
// time is told to wait, and the request runs once.
func TestIdempotencyClaimIsRenewedWhileServed(t *testing.T) {
	const lease = 2 * time.Second
	var calls atomic.Int32
	release := make(chan struct{})
	e := newEnv(t, envOpts{opts: server.Options{IdempotencyLease: lease},
		mounts: []server.Mount{func(v1 *gin.RouterGroup) {
			v1.POST("/long", func(c *gin.Context) {
				calls.Add(1)
				<-release
				c.JSON(http.StatusOK, gin.H{"ok": true})
			})
		}}})
	var releaseOnce sync.Once
	letGo := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(letGo)
	send := func() (int, error) {
		req, _ := http.NewRequest("POST", e.url+"/v1/long", nil)
		req.Header.Set("Authorization", "Bearer "+e.tenantA.Key)
		req.Header.Set("Idempotency-Key", "k-long")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	leaseUntil := func() (until time.Time) {
		e.st.Pool.QueryRow(context.Background(), `SELECT lease_until FROM idempotency_keys WHERE key = 'k-long'`).Scan(&until)
		return until
	}
	firstDone := make(chan int, 1)
	go func() { st, _ := send(); firstDone <- st }()
	var claimed time.Time
	for deadline := time.Now().Add(10 * time.Second); calls.Load() == 0 || claimed.IsZero(); time.Sleep(10 * time.Millisecond) {
		if claimed = leaseUntil(); time.Now().After(deadline) {
			t.Fatal("the first attempt never ran")
		}
	}
	// Renewed (every third of a lease) past the lease it was claimed with, and past another.
	for deadline := time.Now().Add(20 * time.Second); leaseUntil().Before(claimed.Add(lease)); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the claim's lease was not renewed: still %v after 20 s", leaseUntil())
		}
	}
	if st, err := send(); st != http.StatusConflict || calls.Load() != 1 {
		t.Fatalf("a retry while the first runs: %d %v, %d runs; want 409 and one run", st, err, calls.Load())
	}
	letGo()
	if st := <-firstDone; st != http.StatusOK {
		t.Fatalf("the first attempt: %d", st)
	}
}
