package server_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"gpucloud/api"
	"gpucloud/apiserver/app"
	"gpucloud/apiserver/openapi"
	"gpucloud/apiserver/server"
	"gpucloud/apiserver/store"
	billinghttp "gpucloud/billing/httpapi"
	"gpucloud/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// env is a real apiserver over HTTP on a fresh database, with an operator, two tenants (each
// with an admin key), a GPU model and instance types.
type env struct {
	t        *testing.T
	url      string
	srv      *server.Server
	st       *store.Store
	pub      ed25519.PublicKey
	operator string
	tenantA  tenantFixture
	tenantB  tenantFixture
	modelID  string
	dedType  string // 1 dedicated GPU
	shrType  string // 1 shared slice
	cpuType  string // no GPU
}

type tenantFixture struct {
	ID, Key string
}

const gib = int64(1) << 30

type envOpts struct {
	billing bool // mount billing, as the apiserver command does, with its placement check
	mounts  []server.Mount
	paths   []map[string]openapi.PathItem
	opts    server.Options
}

func newEnv(t *testing.T, eo ...envOpts) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := store.Open(ctx, pgtest.NewDatabase(t), 40)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	// The credentials listener, as app.Serve runs it, so that the key cache is on as in service.
	listening := make(chan struct{})
	go func() { defer close(listening); st.ListenCredentials(t.Context(), nil) }()
	t.Cleanup(func() { <-listening }) // t.Context() ends just before cleanups
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	var o server.Options
	if len(eo) > 0 {
		o = eo[0].opts
		o.Mounts, o.Paths = eo[0].mounts, eo[0].paths
	}
	o.Store, o.TokenKey = st, key
	if len(eo) > 0 && eo[0].billing {
		o.Mounts = append(o.Mounts, billinghttp.New(st.Pool, st, nil).Mount)
	}
	srv, err := server.New(o)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	e := &env{t: t, url: hs.URL, srv: srv, st: st, pub: pub}
	_, e.operator, err = app.Bootstrap(ctx, st, "op@example.com", "operator")
	if err != nil {
		t.Fatal(err)
	}
	for i, tf := range []*tenantFixture{&e.tenantA, &e.tenantB} {
		ten, _, key, err := app.TenantWithAdmin(ctx, st, store.Tenant{Name: fmt.Sprintf("tenant-%c", 'a'+i),
			QuotaInstances: 1000, QuotaGPUs: 1000, QuotaGPUMemoryBytes: 1 << 50}, fmt.Sprintf("admin@%c.example", 'a'+i))
		if err != nil {
			t.Fatal(err)
		}
		tf.ID, tf.Key = ten.ID.String(), key
	}
	var m store.GPUModel
	e.must(201, "POST", "/v1/gpu-models", e.operator, map[string]any{"name": "H100", "memory_bytes": 80 * gib, "nvml_match": "H100"}, &m)
	e.modelID = m.ID.String()
	mk := func(name, tier string, gpus int) string {
		body := map[string]any{"name": name, "vcpus": 2, "memory_mib": 4096, "disk_gib": 20, "tier": tier, "gpu_count": gpus, "price_per_hour": 250}
		if gpus > 0 {
			body["gpu_model_id"] = e.modelID
		}
		var it store.InstanceType
		e.must(201, "POST", "/v1/instance-types", e.operator, body, &it)
		return it.ID.String()
	}
	e.dedType, e.shrType, e.cpuType = mk("h100-dedicated", "dedicated", 1), mk("h100-shared", "shared", 1), mk("cpu-small", "dedicated", 0)
	for _, name := range []string{"ubuntu-24.04", "ubuntu", "u"} {
		e.image(name, 1)
	}
	return e
}

// image registers an image; its checksum is that of its name.
func (e *env) image(name string, minDiskGiB int) store.Image {
	var m store.Image
	e.must(201, "POST", "/v1/images", e.operator, map[string]any{"name": name, "source": "file:///var/lib/gpucloud/images/" + name + ".qcow2",
		"sha256": fmt.Sprintf("%x", sha256.Sum256([]byte(name))), "min_disk_gib": minDiskGiB}, &m)
	return m
}

// call sends a JSON request (body: nil, a []byte sent raw, or a value) and decodes the answer into out.
func (e *env) call(method, path, key string, body any, out any, hdr ...string) (int, http.Header, []byte) {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, e.url+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			e.t.Fatalf("%s %s: decode %s: %v", method, path, raw, err)
		}
	}
	return resp.StatusCode, resp.Header, raw
}

// must is call that fails the test unless the status is want.
func (e *env) must(want int, method, path, key string, body any, out any, hdr ...string) {
	e.t.Helper()
	status, _, raw := e.call(method, path, key, body, out, hdr...)
	if status != want {
		e.t.Fatalf("%s %s: status %d, want %d: %s", method, path, status, want, raw)
	}
}

// problemOf decodes a problem document.
func problemOf(t *testing.T, body []byte) map[string]any {
	t.Helper()
	var p map[string]any
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("not a problem document: %s", body)
	}
	return p
}

// host registers a host through the API and its first heartbeat.
func (e *env) host(name string, vcpus, memMiB int) string {
	var d server.NewDaemon
	e.must(201, "POST", "/v1/hosts", e.operator, map[string]string{"name": name}, &d)
	e.must(200, "POST", "/v1/agent/host/heartbeat", d.Credential, hostReport(name, vcpus, memMiB), nil)
	return d.Credential
}

func hostReport(name string, vcpus, memMiB int) api.HostReport {
	return api.HostReport{Hostname: name, Hypervisor: "test:///default",
		Capacity: api.HostCapacity{VCPUs: vcpus, MemoryMiB: memMiB, DiskGiB: 10000}}
}

// gpuServer registers a GPU server with n H100s.
func (e *env) gpuServer(name string, n int) (string, api.GPUServerAck) {
	var d server.NewDaemon
	e.must(201, "POST", "/v1/gpu-servers", e.operator, map[string]string{"name": name}, &d)
	var ack api.GPUServerAck
	e.must(200, "POST", "/v1/agent/gpu-server/heartbeat", d.Credential, gpuServerReport(name, n), &ack)
	return d.Credential, ack
}

func gpuServerReport(name string, n int) api.GPUServerReport {
	rep := api.GPUServerReport{Hostname: name, Endpoint: name + ":7000", Backend: "simulated"}
	for i := 0; i < n; i++ {
		rep.GPUs = append(rep.GPUs, api.GPUInfo{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", name, i), Name: "NVIDIA H100 80GB HBM3",
			MemoryBytes: uint64(80 * gib), Healthy: true})
	}
	return rep
}

// names lists the instances key sees with ?query, by name, sorted.
func (e *env) names(key, query string) []string {
	e.t.Helper()
	var p server.Page[store.Instance]
	e.must(200, "GET", "/v1/instances?"+query, key, nil, &p)
	var out []string
	for _, i := range p.Items {
		out = append(out, i.Name)
	}
	slices.Sort(out)
	return out
}

func (e *env) create(key, name, typ string) (int, store.Instance, []byte) {
	var inst store.Instance
	status, _, body := e.call("POST", "/v1/instances", key, map[string]string{"name": name, "instance_type_id": typ, "image": "ubuntu-24.04"}, &inst)
	return status, inst, body
}

// createAll sends n creates of typ at once, alternating tenants A and B, and hands each answer
// to each, one at a time.
func (e *env) createAll(n int, typ string, each func(status int, inst store.Instance, body []byte)) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			key := e.tenantA.Key
			if i%2 == 1 {
				key = e.tenantB.Key
			}
			status, inst, body := e.create(key, "vm", typ)
			mu.Lock()
			defer mu.Unlock()
			each(status, inst, body)
		}(i)
	}
	close(start)
	wg.Wait()
}

var _ = gin.ReleaseMode
