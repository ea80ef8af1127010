package billingtest

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"gpucloud/billing/webhook"
)

// Received is one webhook request as a Receiver saw it.
type Received struct {
	Event  string         // the envelope's type
	Header string         // the event header
	Data   map[string]any // the envelope's data
	SigErr error          // the signature checked against the receiver's secret
}

// Receiver is a real HTTP endpoint recording what it is sent, checking each signature.
type Receiver struct {
	URL    string
	mu     sync.Mutex
	secret string
	got    []Received
}

// NewReceiver starts a receiver, stopped when the test ends.
func NewReceiver(tb testing.TB) *Receiver {
	tb.Helper()
	r := &Receiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var env struct {
			Type string         `json:"type"`
			Data map[string]any `json:"data"`
		}
		if err := json.Unmarshal(body, &env); err != nil {
			tb.Errorf("webhook body %q: %v", body, err)
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		r.got = append(r.got, Received{Event: env.Type, Header: req.Header.Get(webhook.EventHeader), Data: env.Data,
			SigErr: webhook.Verify(r.secret, req.Header.Get(webhook.SignatureHeader), body, time.Now(), 5*time.Minute)})
	}))
	tb.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

// SetSecret sets the secret signatures are checked with (the endpoint's, known once registered).
func (r *Receiver) SetSecret(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.secret = s
}

// Got returns what was received so far, in order.
func (r *Receiver) Got() []Received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Received(nil), r.got...)
}

// DeliverAll runs a dispatcher (private addresses allowed) until nothing is due.
func DeliverAll(tb testing.TB, pool *pgxpool.Pool) {
	tb.Helper()
	d := webhook.NewDispatcher(pool, nil, webhook.Options{AllowPrivate: true, Timeout: 5 * time.Second})
	for range 20 {
		n, err := d.RunOnce(context.Background())
		if err != nil {
			tb.Fatal(err)
		}
		if n == 0 {
			return
		}
	}
	tb.Fatal("webhook deliveries still due after 20 rounds")
}
