package sdk

import (
	"net/http"
	"strings"
	"testing"
)

// FuzzDecodeProblem feeds arbitrary error bodies: whatever a server or proxy sends, the SDK
// returns an *APIError with the real status and never panics.
func FuzzDecodeProblem(f *testing.F) {
	f.Add(503, []byte(`{"type":"no-capacity","title":"No capacity","status":503,"retryable":true}`))
	f.Add(400, []byte(`{"type":"validation-failed","status":400,"fields":[{"field":"name","reason":"bad"}]}`))
	f.Add(502, []byte(`<html>bad gateway</html>`))
	f.Add(404, []byte(`{"type":1}`))
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		if status < 300 || status > 599 {
			return
		}
		resp := &http.Response{StatusCode: status, Header: http.Header{}}
		ae := decodeProblem(resp, body)
		if ae.Status != status || ae.Type == "" {
			t.Fatalf("status %d body %q: %+v", status, body, ae)
		}
		_ = ae.Error()
		if ae.retryable() != (ae.Retryable || status == 429 || status == 502 || status == 503 || status == 504) {
			t.Fatalf("retryable %v for %+v", ae.retryable(), ae)
		}
	})
}

// FuzzExpand checks path arguments can never escape their segment.
func FuzzExpand(f *testing.F) {
	f.Add("abc")
	f.Add("../../v1/tenants")
	f.Add("a/b?c#d")
	f.Fuzz(func(t *testing.T, id string) {
		p, err := opGetInstance.expand(id)
		if id == "" {
			if err == nil {
				t.Fatal("empty id accepted")
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		rest, ok := strings.CutPrefix(p, "/v1/instances/")
		if !ok || strings.ContainsAny(rest, "/?#") {
			t.Fatalf("id %q expanded to %q", id, p)
		}
	})
}
