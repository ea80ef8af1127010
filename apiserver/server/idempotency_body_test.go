package server_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/gin-gonic/gin"

	"gpucloud/apiserver/server"
)

// A mounted part's handler (billing's) reads the request body itself. The idempotency layer
// reads it first to hash it, and must leave it readable: otherwise every create sent with an
// Idempotency-Key (all of the SDK's) reaches the handler empty.
func TestMountedHandlerReadsBodyAfterIdempotencyKey(t *testing.T) {
	e := newEnv(t, envOpts{mounts: []server.Mount{func(v1 *gin.RouterGroup) {
		v1.POST("/echo", func(c *gin.Context) {
			b, err := io.ReadAll(c.Request.Body)
			if err != nil {
				c.AbortWithStatus(http.StatusBadRequest)
				return
			}
			c.JSON(http.StatusCreated, gin.H{"got": string(b)})
		})
	}}})
	for i, key := range []string{"", "k1", "k1"} { // none, first use, replay
		var out struct{ Got string }
		var hdr []string
		if key != "" {
			hdr = []string{"Idempotency-Key", key}
		}
		status, h, _ := e.call("POST", "/v1/echo", e.tenantA.Key, []byte(`{"n":1}`), &out, hdr...)
		if status != http.StatusCreated || out.Got != `{"n":1}` {
			t.Fatalf("key %q: %d, handler got %q", key, status, out.Got)
		}
		if replayed := h.Get("Idempotent-Replayed") == "true"; replayed != (i == 2) {
			t.Fatalf("call %d: replayed %v", i, replayed)
		}
	}
}
