package server

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"gpucloud/api"
	"gpucloud/apiserver/store"
)

// gpuServerRevocations answers a GPU server's long-poll for its revoked instances (api.Revocations):
// at once when the set differs from the version it knows, else when it changes or wait passes.
func (s *Server) gpuServerRevocations(c *gin.Context) error {
	wait := time.Duration(0)
	if w := c.Query("wait"); w != "" {
		d, err := time.ParseDuration(w)
		if err != nil || d < 0 || d > api.MaxRevocationWait {
			var f fields
			f.check(false, "wait", "a duration from 0s to "+api.MaxRevocationWait.String())
			return f.err()
		}
		wait = d
	}
	known := c.Query("known")
	id := principal(c).DaemonID
	ctx := c.Request.Context()
	deadline := time.Now().Add(wait)
	for {
		// Wait before reading, so a change committed after the read still wakes us.
		wake, live, cancel := s.store.RevocationWait(id)
		list, err := s.store.Revocations(ctx, id, s.opts.TokenTTL+time.Minute)
		if err != nil {
			cancel()
			if err == store.ErrNotFound {
				return forbidden("this credential is not a GPU server's")
			}
			return err
		}
		out := revocationSet(list)
		left := time.Until(deadline)
		if out.Version != known || left <= 0 {
			cancel()
			c.JSON(http.StatusOK, out)
			return nil
		}
		if !live {
			left = min(left, store.RevocationPoll)
		}
		t := time.NewTimer(left)
		select {
		case <-wake:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		cancel()
		if ctx.Err() != nil {
			return nil // the GPU server went away
		}
	}
}

// revocationSet is the answer for list, its version a digest of the whole set.
func revocationSet(list []store.Revoked) api.Revocations {
	out := api.Revocations{Instances: make([]api.RevokedInstance, 0, len(list))}
	h := sha256.New()
	for _, r := range list {
		at := r.At.UTC()
		out.Instances = append(out.Instances, api.RevokedInstance{InstanceID: r.InstanceID.String(), RevokedAt: at})
		h.Write([]byte(r.InstanceID.String() + at.Format(time.RFC3339Nano) + "\n"))
	}
	out.Version = hex.EncodeToString(h.Sum(nil)[:12])
	return out
}
