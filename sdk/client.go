package sdk

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"gpucloud/internal/tlsconf"
)

// Client calls the API. It is safe for concurrent use.
type Client struct {
	base   *url.URL
	key    string
	http   *http.Client
	retry  RetryPolicy
	agent  string
	sleepy func(ctx context.Context, d time.Duration) error
}

// RetryPolicy bounds retries: at most MaxAttempts tries in all, waits growing from MinBackoff
// and doubling up to MaxBackoff, with jitter; a Retry-After from the server is honoured up to
// MaxBackoff.
type RetryPolicy struct {
	MaxAttempts int
	MinBackoff  time.Duration
	MaxBackoff  time.Duration
}

// DefaultRetry is used when Options.Retry is zero.
var DefaultRetry = RetryPolicy{MaxAttempts: 4, MinBackoff: 200 * time.Millisecond, MaxBackoff: 5 * time.Second}

// Options configure a Client.
type Options struct {
	// HTTPClient defaults to one with a 60 s timeout.
	HTTPClient *http.Client
	// CAFile, when set and HTTPClient is not, names PEM CA certificates that the default client
	// trusts for an https endpoint instead of the system roots (a private CA).
	CAFile string
	Retry  RetryPolicy
	// UserAgent defaults to "gpucloud-sdk-go".
	UserAgent string
}

// New returns a client of the API at endpoint (e.g. "https://api.example.com") with an API key
// (or a daemon credential for the agent API).
func New(endpoint, apiKey string, opts ...Options) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(endpoint, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("sdk: endpoint %q must be an http:// or https:// URL", endpoint)
	}
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.HTTPClient == nil {
		hc, err := tlsconf.Client(o.CAFile, 60*time.Second)
		if err != nil {
			return nil, fmt.Errorf("sdk: %w", err)
		}
		o.HTTPClient = hc
	}
	if o.Retry.MaxAttempts == 0 {
		o.Retry = DefaultRetry
	}
	if o.UserAgent == "" {
		o.UserAgent = "gpucloud-sdk-go"
	}
	return &Client{base: u, key: apiKey, http: o.HTTPClient, retry: o.Retry, agent: o.UserAgent, sleepy: sleep}, nil
}

// Endpoint is the API's base URL.
func (c *Client) Endpoint() string { return c.base.String() }

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// request is one call: an operation, its path arguments, query, body and where the answer goes.
type request struct {
	op    Op
	args  []string
	query url.Values
	body  any
	out   any
	// raw, when set, receives the body undecoded (CSV reports).
	raw    *[]byte
	accept string
}

// call runs r, retrying what is worth retrying.
func (c *Client) call(ctx context.Context, r request) error {
	path, err := r.op.expand(r.args...)
	if err != nil {
		return err
	}
	u := *c.base
	u.Path += path
	if len(r.query) > 0 {
		u.RawQuery = r.query.Encode()
	}
	var body []byte
	if r.body != nil {
		if body, err = json.Marshal(r.body); err != nil {
			return fmt.Errorf("sdk: encode %s %s: %w", r.op.Method, path, err)
		}
	}
	// One key for all attempts: a retried create is the same create.
	var idemKey string
	if SendsIdempotencyKey(r.op) {
		idemKey = newKey()
	}
	backoff := c.retry.MinBackoff
	var lastErr error
	for attempt := 1; ; attempt++ {
		wait, err := c.once(ctx, r, u.String(), path, body, idemKey)
		lastErr = err
		if err == nil || wait < 0 || attempt >= c.retry.MaxAttempts || ctx.Err() != nil {
			return err
		}
		if wait == 0 {
			wait = backoff/2 + rand.N(backoff/2+1)
			backoff = min(2*backoff, c.retry.MaxBackoff)
		}
		if err := c.sleepy(ctx, min(wait, c.retry.MaxBackoff)); err != nil {
			return fmt.Errorf("%w (while waiting to retry after: %w)", err, lastErr)
		}
	}
}

// once sends one attempt. wait < 0: do not retry; 0: retry after the policy's backoff; > 0:
// retry after that long (the server's Retry-After).
func (c *Client) once(ctx context.Context, r request, u, path string, body []byte, idemKey string) (time.Duration, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, r.op.Method, u, rd)
	if err != nil {
		return -1, fmt.Errorf("sdk: build %s %s: %w", r.op.Method, path, err)
	}
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	req.Header.Set("Accept", "application/json")
	if r.accept != "" {
		req.Header.Set("Accept", r.accept)
	}
	req.Header.Set("User-Agent", c.agent)
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return -1, ctx.Err()
		}
		return 0, &NetworkError{Method: r.op.Method, Path: path, Err: err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return 0, &NetworkError{Method: r.op.Method, Path: path, Err: fmt.Errorf("read answer: %w", err)}
	}
	if resp.StatusCode >= 300 {
		ae := decodeProblem(resp, raw)
		ae.Method, ae.Path = r.op.Method, path
		if !ae.retryable() && !(ae.Status == http.StatusConflict && ae.Type == "idempotency-in-progress") {
			return -1, ae
		}
		return retryAfter(resp.Header.Get("Retry-After")), ae
	}
	switch {
	case r.raw != nil:
		*r.raw = raw
	case r.out != nil && len(raw) > 0:
		if err := json.Unmarshal(raw, r.out); err != nil {
			return -1, fmt.Errorf("sdk: decode answer of %s %s: %w", r.op.Method, path, err)
		}
	}
	return -1, nil
}

func decodeProblem(resp *http.Response, raw []byte) *APIError {
	ae := &APIError{}
	if err := json.Unmarshal(raw, ae); err != nil || ae.Type == "" {
		// Not a problem document (a proxy's error page): keep what we can.
		ae = &APIError{Type: "http-" + strconv.Itoa(resp.StatusCode), Title: http.StatusText(resp.StatusCode),
			Detail: strings.TrimSpace(string(raw[:min(len(raw), 200)]))}
	}
	ae.Status = resp.StatusCode
	if ae.RequestID == "" {
		ae.RequestID = resp.Header.Get("X-Request-ID")
	}
	return ae
}

func retryAfter(h string) time.Duration {
	if s, err := strconv.Atoi(h); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(h); err == nil {
		if d := time.Until(t); d > 0 {
			return d
		}
	}
	return 0
}

func newKey() string {
	var b [16]byte
	_, _ = crand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// do runs r and decodes the answer into a T.
func do[T any](ctx context.Context, c *Client, r request) (T, error) {
	var v T
	r.out = &v
	err := c.call(ctx, r)
	return v, err
}

// SendsIdempotencyKey reports whether calls of o carry an Idempotency-Key: creates and actions
// (POST) of the public API. The agent API's POSTs (heartbeats, token renewals) are idempotent
// by nature and documented without the header; a key per heartbeat would only fill the
// server's idempotency table.
func SendsIdempotencyKey(o Op) bool {
	return o.Method == http.MethodPost && !strings.HasPrefix(o.Path, "/v1/agent/")
}
