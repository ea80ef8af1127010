package server_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"gpucloud/apiserver/openapi"
	"gpucloud/apiserver/server"
	"gpucloud/internal/authn"
)

// unserved are routes outside the API document on purpose: probes and the document itself.
var unserved = []string{"GET /healthz", "GET /readyz", "GET /metrics", "GET /v1/openapi.json", "GET /", "GET /console/{filepath}"}

// Every route is documented and every documented operation is routed, mounted ones included.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	mountDoc := openapi.New("x", "v1")
	mountDoc.Op(http.MethodGet, "/v1/billing/usage", "getUsage", "Usage", "billing", nil, nil, http.StatusOK)
	var sawPrincipal authn.Role
	e := newEnv(t, envOpts{
		mounts: []server.Mount{func(v1 *gin.RouterGroup) {
			v1.GET("/billing/usage", func(c *gin.Context) {
				p, _ := authn.FromContext(c.Request.Context())
				sawPrincipal = p.Role
				c.JSON(http.StatusOK, gin.H{})
			})
		}},
		paths: []map[string]openapi.PathItem{mountDoc.Paths},
	})
	routes := e.srv.Routes()
	documented := e.srv.OpenAPI().Operations()
	for _, r := range routes {
		if !slices.Contains(documented, r) && !slices.Contains(unserved, r) {
			t.Errorf("route %s is not in the OpenAPI document", r)
		}
	}
	for _, d := range documented {
		if !slices.Contains(routes, d) {
			t.Errorf("documented %s has no route", d)
		}
	}
	if !slices.Contains(routes, "GET /v1/billing/usage") {
		t.Fatal("mounted route missing")
	}
	// The mounted route is authenticated and sees the principal.
	e.must(401, "GET", "/v1/billing/usage", "", nil, nil)
	e.must(200, "GET", "/v1/billing/usage", e.operator, nil, nil)
	if sawPrincipal != authn.RoleOperator {
		t.Fatalf("mounted handler saw role %q", sawPrincipal)
	}
	// The served document is valid JSON with resolvable schema references.
	var doc map[string]any
	e.must(200, "GET", "/v1/openapi.json", "", nil, &doc)
	raw, _ := json.Marshal(doc)
	schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
	for _, part := range strings.Split(string(raw), `"$ref":"#/components/schemas/`)[1:] {
		name := part[:strings.IndexByte(part, '"')]
		if _, ok := schemas[name]; !ok {
			t.Errorf("dangling schema reference %s", name)
		}
	}
	// A mount documenting an existing operation is refused.
	dup := openapi.New("x", "v1")
	dup.Op(http.MethodGet, "/v1/instances", "x", "x", "x", nil, nil, 200)
	if _, err := server.New(server.Options{Store: e.st, TokenKey: make([]byte, 64), Paths: []map[string]openapi.PathItem{dup.Paths}}); err == nil {
		t.Fatal("duplicate documentation accepted")
	}
}

// Probes are open; /metrics only to the metrics token (Prometheus) and operators.
func TestProbesAndMetrics(t *testing.T) {
	const token = "prometheus-scrape-token-0123456789"
	e := newEnv(t, envOpts{opts: server.Options{MetricsToken: token}})
	e.must(200, "GET", "/healthz", "", nil, nil)
	e.must(200, "GET", "/readyz", "", nil, nil)
	e.host("h1", 8, 8192)
	e.create(e.tenantA.Key, "vm", e.cpuType)
	for _, key := range []string{token, e.operator} {
		status, _, body := e.call("GET", "/metrics", key, nil, nil)
		if status != 200 {
			t.Fatalf("metrics: %d %s", status, body)
		}
		for _, want := range []string{`apiserver_instances_placed_total 1`, `apiserver_http_requests_total{code="201",method="POST",route="/v1/instances"} 1`} {
			if !strings.Contains(string(body), want) {
				t.Errorf("metrics lack %q", want)
			}
		}
	}
	for key, want := range map[string]int{"": 401, "not-the-token": 401, token + "x": 401, e.tenantA.Key: 403} {
		status, hdr, body := e.call("GET", "/metrics", key, nil, nil)
		if status != want || hdr.Get("Content-Type") != "application/problem+json" || strings.Contains(string(body), "apiserver_") {
			t.Errorf("metrics with %.12q: %d %s, want a %d problem", key, status, body, want)
		}
	}
}
