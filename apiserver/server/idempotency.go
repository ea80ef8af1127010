package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"gpucloud/internal/authn"
	"gpucloud/internal/problem"
)

// idempotent honours Idempotency-Key on POST requests. Keys are scoped per principal. The first
// request with a key claims it (a row with status 0), runs, and stores its answer; a repeat with
// the same method, path and body gets the stored answer back, one with anything else a 422, and
// one arriving while the first still runs a retryable 409. Server errors (5xx) and requests
// abandoned by their client (499) are not stored, so the client can retry them with the same key.
// A claim is leased (Options.IdempotencyLease) and renewed while its request runs: one whose
// lease ran out was left by an apiserver that died mid-request, and a repeat takes it over and
// runs the request (before, the key answered "still being served" for ever: the chaos test's
// uncordon, retried across an apiserver kill, never went through).
func (s *Server) idempotent(c *gin.Context) {
	key := c.GetHeader("Idempotency-Key")
	if c.Request.Method != http.MethodPost || key == "" {
		c.Next()
		return
	}
	if len(key) > 255 {
		s.fail(c, invalid("Idempotency-Key", "at most 255 characters"))
		return
	}
	body, err := readBody(c)
	if err != nil {
		s.fail(c, err)
		return
	}
	h := sha256.New()
	h.Write([]byte(c.Request.Method + " " + c.Request.URL.Path + "\n"))
	h.Write(body)
	sum := h.Sum(nil)
	owner := principalKey(principal(c))
	ctx := c.Request.Context()

	if c.FullPath() == createInstancePath {
		// The create records the key in its own transaction (see store.CreateInstance): one
		// commit instead of three, and the look-up of a known key rides in the create's first
		// round trip; a known key comes back as store.ErrIdempotencyRace and is replayed then.
		c.Set(idemKey, idemClaim{owner: owner, key: key, sum: sum})
		c.Next()
		return
	}

	claim, lease := uuid.New(), s.opts.IdempotencyLease.Milliseconds()
	tag, err := s.store.Pool.Exec(ctx, `INSERT INTO idempotency_keys (principal, key, request_hash, claim_id, lease_until)
		VALUES ($1, $2, $3, $4, now() + $5 * interval '1 millisecond') ON CONFLICT DO NOTHING`, owner, key, sum, claim, lease)
	if err != nil {
		s.fail(c, err)
		return
	}
	if tag.RowsAffected() == 0 {
		// Taken: by a request still served, one answered, or one whose apiserver died while
		// serving it (its lease ran out), whose claim this request takes over.
		tag, err = s.store.Pool.Exec(ctx, `UPDATE idempotency_keys SET claim_id = $4, lease_until = now() + $5 * interval '1 millisecond'
			WHERE principal = $1 AND key = $2 AND request_hash = $3 AND status = 0 AND lease_until < now()`, owner, key, sum, claim, lease)
		if err != nil {
			s.fail(c, err)
			return
		}
		if tag.RowsAffected() == 0 {
			s.replay(c, owner, key, sum)
			return
		}
		s.log.Warn("idempotency: taking over a claim whose apiserver stopped renewing it (it died mid-request)", "key", key)
	}
	stopRenewing := s.renewClaim(owner, key, claim)
	rec := &recorder{ResponseWriter: c.Writer}
	c.Writer = rec
	c.Next()
	stopRenewing()
	// Store with a fresh context: the answer was sent, the client may already be gone.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	// 5xx and 499 (the client left and the handler's context was cancelled) are not answers to
	// keep: the work did not complete, and a retry with this key must run it again. Either is
	// done only while the claim is still this request's.
	if rec.Status() >= 500 || rec.Status() == 499 {
		tag, err = s.store.Pool.Exec(sctx, `DELETE FROM idempotency_keys WHERE principal = $1 AND key = $2 AND claim_id = $3`, owner, key, claim)
	} else {
		tag, err = s.store.Pool.Exec(sctx, `UPDATE idempotency_keys SET status = $4, content_type = $5, body = $6
			WHERE principal = $1 AND key = $2 AND claim_id = $3`, owner, key, claim, rec.Status(), rec.Header().Get("Content-Type"), redact(rec.buf.Bytes()))
	}
	switch {
	case err != nil:
		s.log.Error("store idempotent response", "key", key, "err", err)
	case tag.RowsAffected() == 0:
		s.log.Warn("idempotency: the claim was taken over while its request ran (its lease was not renewed); this answer is not kept", "key", key)
	}
}

// renewClaim renews the lease of claim on (owner, key) every third of a lease until the returned
// function is called (the request is done).
func (s *Server) renewClaim(owner, key string, claim uuid.UUID) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	lease := s.opts.IdempotencyLease
	go func() {
		defer close(done)
		every(ctx, lease/3, func() {
			_, err := s.store.Pool.Exec(ctx, `UPDATE idempotency_keys SET lease_until = now() + $4 * interval '1 millisecond'
				WHERE principal = $1 AND key = $2 AND claim_id = $3 AND status = 0`, owner, key, claim, lease.Milliseconds())
			if err != nil && ctx.Err() == nil {
				s.log.Warn("idempotency: renewing a claim's lease", "key", key, "err", err)
			}
		})
	}()
	return func() { cancel(); <-done }
}

const idemKey = "idempotency"

type idemClaim struct {
	owner, key string
	sum        []byte
}

// replay answers from the stored record of (owner, key), which was just found taken.
func (s *Server) replay(c *gin.Context, owner, key string, sum []byte) {
	var (
		stored      []byte
		status      int
		contentType string
		body        []byte
	)
	err := s.store.Pool.QueryRow(c.Request.Context(), `SELECT request_hash, status, content_type, body FROM idempotency_keys
		WHERE principal = $1 AND key = $2`, owner, key).Scan(&stored, &status, &contentType, &body)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		// The first request failed with a 5xx and released the key between our insert and select.
		d := problem.New(http.StatusConflict, "idempotency-in-progress", "Request in progress", "retry")
		d.Retryable = true
		s.fail(c, d)
	case err != nil:
		s.fail(c, err)
	case !bytes.Equal(stored, sum):
		s.fail(c, problem.New(http.StatusUnprocessableEntity, "idempotency-key-reused", "Idempotency key reused",
			"this Idempotency-Key was used with a different request body or path"))
	case status == 0:
		d := problem.New(http.StatusConflict, "idempotency-in-progress", "Request in progress",
			"a request with this Idempotency-Key is still being served")
		d.Retryable = true
		s.fail(c, d)
	default:
		c.Header("Idempotent-Replayed", "true")
		c.Data(status, contentType, body)
		c.Abort()
	}
}

func principalKey(p authn.Principal) string {
	if p.Role == authn.RoleDaemon {
		return "daemon:" + p.DaemonID.String()
	}
	return "user:" + p.UserID.String()
}

// recorder keeps a copy of the response body.
type recorder struct {
	gin.ResponseWriter
	buf bytes.Buffer
}

func (r *recorder) Write(b []byte) (int, error) {
	r.buf.Write(b)
	return r.ResponseWriter.Write(b)
}

func (r *recorder) WriteString(s string) (int, error) {
	r.buf.WriteString(s)
	return r.ResponseWriter.WriteString(s)
}

// secretFields are answers' fields shown once (API key secrets, daemon credentials). They are
// never stored with an idempotent answer: a replay says what was created, without the secret.
var secretFields = []string{"secret", "credential"}

func redact(body []byte) []byte {
	if !bytes.Contains(body, []byte(`"secret"`)) && !bytes.Contains(body, []byte(`"credential"`)) {
		return body
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return []byte(`{}`) // not an object: store nothing rather than risk a secret
	}
	for _, f := range secretFields {
		delete(m, f)
	}
	out, err := json.Marshal(m)
	if err != nil {
		return []byte(`{}`)
	}
	return out
}
