package server_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"gpucloud/apiserver/server"
)

// A POST whose client went away mid-request is answered 499 (nobody reads it) and its work was
// cut short, so its Idempotency-Key must not keep that answer: the client's retry with the same
// key runs the request again instead of being replayed "client closed request" forever.
func TestIdempotencyKeyNotKeptForAbandonedRequest(t *testing.T) {
	var calls atomic.Int32
	e := newEnv(t, envOpts{mounts: []server.Mount{func(v1 *gin.RouterGroup) {
		v1.POST("/slow", func(c *gin.Context) {
			if calls.Add(1) == 1 { // the first attempt outlives its client
				<-c.Request.Context().Done()
				c.AbortWithStatusJSON(499, gin.H{"type": "client-closed-request"})
				return
			}
			c.JSON(http.StatusOK, gin.H{"ok": true})
		})
	}}})
	send := func(timeout time.Duration) (int, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "POST", e.url+"/v1/slow", nil)
		req.Header.Set("Authorization", "Bearer "+e.tenantA.Key)
		req.Header.Set("Idempotency-Key", "abandoned")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if _, err := send(200 * time.Millisecond); err == nil {
		t.Fatal("the first attempt was answered; it should have timed out")
	}
	// Wait until the server is done with the first attempt's claim (stored or dropped).
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var inProgress int
		if err := e.st.Pool.QueryRow(context.Background(), `SELECT count(*) FROM idempotency_keys
			WHERE key = 'abandoned' AND status = 0`).Scan(&inProgress); err != nil {
			t.Fatal(err)
		}
		if inProgress == 0 && calls.Load() == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the abandoned request's claim is still in progress after 5 s")
		}
	}
	status, err := send(5 * time.Second)
	if err != nil || status != http.StatusOK || calls.Load() != 2 {
		t.Fatalf("retry with the same key: status %d (%v), handler ran %d times; want 200 from a second run", status, err, calls.Load())
	}
}
