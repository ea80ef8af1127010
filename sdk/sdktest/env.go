// Package sdktest starts a real apiserver (the server package over HTTP, on a fresh PostgreSQL
// database from pgtest) for the tests of the SDK and gpuctl, seeded through the API itself.
// Test packages using it need `func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }`.
package sdktest

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"gpucloud/api"
	"gpucloud/apiserver/app"
	"gpucloud/apiserver/server"
	"gpucloud/apiserver/store"
	"gpucloud/internal/authn"
	"gpucloud/internal/pgtest"
	"gpucloud/sdk"
)

// Tenant is a seeded tenant with its admin's key.
type Tenant struct {
	ID, AdminKey, AdminID string
}

// Env is a running apiserver with an operator, a finance user, two tenants, a GPU model and
// three instance types (dedicated GPU, shared GPU, CPU only).
type Env struct {
	URL                    string
	Server                 *server.Server
	Store                  *store.Store
	Operator, Finance      string // API keys
	A, B                   Tenant
	ModelID                string
	Dedicated, Shared, CPU string // instance type ids
	OperatorClient         *sdk.Client
	meter                  *Meter // billing.go
}

// StartServer serves the apiserver as it ships (billing mounted) on a fresh database and returns
// its URL. The server, its background work and the database connections stop at the test's end.
func StartServer(ctx context.Context, t testing.TB) (string, *server.Server, *store.Store) {
	t.Helper()
	st, err := store.Open(ctx, pgtest.NewDatabase(t), 20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	srvCtx, stopServer := context.WithCancel(context.Background())
	t.Cleanup(stopServer)
	srv, err := app.NewServer(srvCtx, server.Options{Store: st, TokenKey: key})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return hs.URL, srv, st
}

// New starts the apiserver; everything stops at the test's end.
func New(t testing.TB) *Env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url, srv, st := StartServer(ctx, t)
	e := &Env{URL: url, Server: srv, Store: st}
	var err error
	if _, e.Operator, err = app.Bootstrap(ctx, st, "op@example.com", authn.RoleOperator); err != nil {
		t.Fatal(err)
	}
	if _, e.Finance, err = app.Bootstrap(ctx, st, "fin@example.com", authn.RoleFinance); err != nil {
		t.Fatal(err)
	}
	for i, tf := range []*Tenant{&e.A, &e.B} {
		ten, u, key, err := app.TenantWithAdmin(ctx, st, store.Tenant{Name: fmt.Sprintf("tenant-%c", 'a'+i),
			QuotaInstances: 100, QuotaGPUs: 100, QuotaGPUMemoryBytes: 1 << 50}, fmt.Sprintf("admin@%c.example", 'a'+i))
		if err != nil {
			t.Fatal(err)
		}
		tf.ID, tf.AdminKey, tf.AdminID = ten.ID.String(), key, u.ID.String()
	}
	e.OperatorClient = e.Client(t, e.Operator)
	m, err := e.OperatorClient.CreateGPUModel(ctx, sdk.CreateGPUModelRequest{Name: "H100", MemoryBytes: 80 << 30, NVMLMatch: "H100"})
	if err != nil {
		t.Fatal(err)
	}
	e.ModelID = m.ID
	mk := func(name, tier, model string, gpus int) string {
		it, err := e.OperatorClient.CreateInstanceType(ctx, sdk.CreateInstanceTypeRequest{Name: name, VCPUs: 2, MemoryMiB: 4096,
			DiskGiB: 20, GPUModelID: model, GPUCount: gpus, Tier: tier, PricePerHour: 250})
		if err != nil {
			t.Fatal(err)
		}
		return it.ID
	}
	e.Dedicated, e.Shared, e.CPU = mk("h100-dedicated", "dedicated", m.ID, 1), mk("h100-shared", "shared", m.ID, 1), mk("cpu-small", "dedicated", "", 0)
	// Images the tests name; hostd never fetches these (no hostd runs on them).
	for _, name := range TestImages {
		if _, err := e.OperatorClient.CreateImage(ctx, sdk.CreateImageRequest{Name: name, Source: "file:///nonexistent/" + name + ".qcow2",
			SHA256: fmt.Sprintf("%x", sha256.Sum256([]byte(name))), MinDiskGiB: 1}); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// TestImages are registered in every Env, with checksums of nothing real.
var TestImages = []string{"ubuntu-24.04", "ubuntu", "u"}

// ImageFile registers the image file at path as name (file:// source, its real checksum), as an
// operator would for hostd to fetch; the test harnesses that run hostd use it.
func (e *Env) ImageFile(t testing.TB, name, path string) {
	t.Helper()
	if _, err := app.EnsureImage(t.Context(), e.Store, name, path, 1, false); err != nil {
		t.Fatal(err)
	}
}

// Client is an SDK client with key and quick retries.
func (e *Env) Client(t testing.TB, key string) *sdk.Client {
	t.Helper()
	c, err := sdk.New(e.URL, key, sdk.Options{Retry: sdk.RetryPolicy{MaxAttempts: 3, MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Host registers a host and sends its first heartbeat; it returns the host id and an SDK
// client holding the host's credential (to play hostd).
func (e *Env) Host(t testing.TB, name string, vcpus int) (string, *sdk.Client) {
	t.Helper()
	ctx := context.Background()
	d, err := e.OperatorClient.CreateHost(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	hc := e.Client(t, d.Credential)
	if _, err := hc.HostHeartbeat(ctx, api.HostReport{Hostname: name, Hypervisor: "test:///default",
		Capacity: api.HostCapacity{VCPUs: vcpus, MemoryMiB: vcpus * 4096, DiskGiB: 10000}}); err != nil {
		t.Fatal(err)
	}
	return d.ID, hc
}

// GPUServer registers a GPU server with n H100s; it returns its id and credential client.
func (e *Env) GPUServer(t testing.TB, name string, n int) (string, *sdk.Client) {
	t.Helper()
	ctx := context.Background()
	d, err := e.OperatorClient.CreateGPUServer(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	gc := e.Client(t, d.Credential)
	rep := api.GPUServerReport{Hostname: name, Endpoint: name + ":7000", Backend: "simulated"}
	for i := 0; i < n; i++ {
		rep.GPUs = append(rep.GPUs, api.GPUInfo{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", name, i), Name: "NVIDIA H100 80GB HBM3",
			MemoryBytes: 80 << 30, Healthy: true})
	}
	if _, err := gc.GPUServerHeartbeat(ctx, rep); err != nil {
		t.Fatal(err)
	}
	return d.ID, gc
}
