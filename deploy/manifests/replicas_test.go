package manifests

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"

	"gpucloud/api"
	"gpucloud/apiserver/app"
	"gpucloud/apiserver/server"
	"gpucloud/apiserver/store"
	"gpucloud/internal/authn"
	"gpucloud/internal/pgtest"
	"gpucloud/sdk"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// replica is one apiserver process's worth: its own connection pool, sweeper and listener.
type replica struct {
	url string
	st  *store.Store
}

// metricsToken is the replicas' /metrics bearer token, as Prometheus sends it.
const metricsToken = "test-metrics-token-0123456789abcdef"

// startReplicas runs n apiservers, as `apiserver serve` does, on one database with one token key.
func startReplicas(t *testing.T, n int) []replica {
	t.Helper()
	db := pgtest.NewDatabase(t)
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	var out []replica
	for i := 0; i < n; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		st, err := store.Open(ctx, db, 8)
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			done <- app.Serve(ctx, app.Config{Listener: ln, Store: st, TokenKey: key,
				Options: server.Options{MetricsToken: metricsToken}})
		}()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("replica: %v", err)
			}
			st.Close()
		})
		out = append(out, replica{url: "http://" + ln.Addr().String(), st: st})
	}
	return out
}

func sdkClient(t *testing.T, url, key string) *sdk.Client {
	t.Helper()
	c, err := sdk.New(url, key, sdk.Options{Retry: sdk.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type answer struct {
	status          int
	inst            sdk.Instance
	body            string
	key             string
	replica, tenant int
}

// create posts an instance create with an Idempotency-Key (no SDK retries: each answer counts).
func create(t *testing.T, url, apiKey, idemKey, typeID string) answer {
	body, _ := json.Marshal(sdk.CreateInstanceRequest{Name: "vm", InstanceTypeID: typeID, Image: "ubuntu-24.04"})
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/instances", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", idemKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("POST %s: %v", url, err)
		return answer{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, body: string(b), key: idemKey}
	if resp.StatusCode == http.StatusCreated || resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, &a.inst); err != nil {
			t.Errorf("answer %s: %v", b, err)
		}
	}
	return a
}

// TestTwoReplicasShareOneDatabase: creates spread over two replicas never oversubscribe the
// GPUs, and an Idempotency-Key replayed on the other replica (or raced on both) yields one
// instance.
func TestTwoReplicasShareOneDatabase(t *testing.T) {
	ctx := context.Background()
	rs := startReplicas(t, 2)
	_, opKey, err := app.Bootstrap(ctx, rs[0].st, "op@example.com", authn.RoleOperator)
	if err != nil {
		t.Fatal(err)
	}
	var tenantKeys []string
	for _, name := range []string{"tenant-a", "tenant-b"} {
		_, _, k, err := app.TenantWithAdmin(ctx, rs[1].st, store.Tenant{Name: name, QuotaInstances: 100, QuotaGPUs: 100,
			QuotaGPUMemoryBytes: 1 << 50}, "admin@"+name+".example")
		if err != nil {
			t.Fatal(err)
		}
		tenantKeys = append(tenantKeys, k)
	}
	// Fleet set up through replica A, agents heartbeating through replica B.
	opA := sdkClient(t, rs[0].url, opKey)
	model, err := opA.CreateGPUModel(ctx, sdk.CreateGPUModelRequest{Name: "H100", MemoryBytes: 80 << 30, NVMLMatch: "H100"})
	if err != nil {
		t.Fatal(err)
	}
	it, err := opA.CreateInstanceType(ctx, sdk.CreateInstanceTypeRequest{Name: "h100-dedicated", VCPUs: 2, MemoryMiB: 4096,
		DiskGiB: 20, GPUModelID: model.ID, GPUCount: 1, Tier: "dedicated", PricePerHour: 250})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := opA.CreateImage(ctx, sdk.CreateImageRequest{Name: "ubuntu-24.04", Source: "https://images.example/ubuntu-24.04.qcow2",
		SHA256: strings.Repeat("ab", 32), MinDiskGiB: 10}); err != nil {
		t.Fatal(err)
	}
	host, err := opA.CreateHost(ctx, "vmhost-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sdkClient(t, rs[1].url, host.Credential).HostHeartbeat(ctx, api.HostReport{Hostname: "vmhost-1",
		Hypervisor: "test:///default", Capacity: api.HostCapacity{VCPUs: 1000, MemoryMiB: 1 << 22, DiskGiB: 100000}}); err != nil {
		t.Fatal(err)
	}
	const gpus = 6
	gs, err := opA.CreateGPUServer(ctx, "gpu-1")
	if err != nil {
		t.Fatal(err)
	}
	rep := api.GPUServerReport{Hostname: "gpu-1", Endpoint: "gpu-1:7070", Backend: "simulated"}
	for i := 0; i < gpus; i++ {
		rep.GPUs = append(rep.GPUs, api.GPUInfo{Index: i, UUID: fmt.Sprintf("GPU-%d", i), Name: "NVIDIA H100 80GB HBM3",
			MemoryBytes: 80 << 30, Healthy: true})
	}
	if _, err := sdkClient(t, rs[1].url, gs.Credential).GPUServerHeartbeat(ctx, rep); err != nil {
		t.Fatal(err)
	}

	// 1. One key raced on both replicas at once: one instance; every answer names it or is
	// retryable (409: the key is claimed by a request still running; 503: placement skipped GPUs
	// that racing transactions held locked, then released on the key conflict), and retrying
	// on either replica gets the one instance.
	answers := concurrently(8, func(i int) answer {
		return create(t, rs[i%2].url, tenantKeys[0], "raced-key", it.ID)
	})
	raced := ""
	for _, a := range answers {
		switch {
		case a.status == http.StatusCreated || a.status == http.StatusOK:
			if raced != "" && a.inst.ID != raced {
				t.Fatalf("one key, two instances: %s and %s", raced, a.inst.ID)
			}
			raced = a.inst.ID
		case a.status == http.StatusConflict || a.status == http.StatusServiceUnavailable:
			if !bytes.Contains([]byte(a.body), []byte(`"retryable":true`)) {
				t.Fatalf("raced create refused for good: %d %s", a.status, a.body)
			}
		default:
			t.Fatalf("raced create: %d %s", a.status, a.body)
		}
	}
	if raced == "" {
		t.Fatalf("no raced create succeeded: %+v", answers)
	}
	for _, r := range rs {
		if a := create(t, r.url, tenantKeys[0], "raced-key", it.ID); a.inst.ID != raced {
			t.Fatalf("retry on %s: %d %s, want instance %s", r.url, a.status, a.body, raced)
		}
	}

	// 2. Many creates, distinct keys, alternating replicas, for the 5 GPUs left: exactly 5 placed.
	answers = concurrently(30, func(i int) answer {
		a := create(t, rs[i%2].url, tenantKeys[(i/2)%2], fmt.Sprintf("key-%d", i), it.ID)
		a.replica, a.tenant = i%2, (i/2)%2
		return a
	})
	placed := map[string]answer{}
	for _, a := range answers {
		switch a.status {
		case http.StatusCreated:
			placed[a.inst.ID] = a
		case http.StatusServiceUnavailable:
		default:
			t.Fatalf("create: %d %s", a.status, a.body)
		}
	}
	if len(placed) != gpus-1 {
		t.Fatalf("%d instances placed for %d free GPUs", len(placed), gpus-1)
	}
	var instances, reservations, overfull int
	if err := rs[0].st.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM instances), (SELECT count(*) FROM gpu_reservations),
		(SELECT count(*) FROM (SELECT gpu_id FROM gpu_reservations GROUP BY gpu_id HAVING count(*) > 1) x)`).
		Scan(&instances, &reservations, &overfull); err != nil {
		t.Fatal(err)
	}
	if instances != gpus || reservations != gpus || overfull != 0 {
		t.Fatalf("%d instances, %d GPU reservations, %d GPUs reserved twice; want %d, %d, 0", instances, reservations, overfull, gpus, gpus)
	}

	// 3. Each placed create's key replayed on the other replica returns the same instance and
	// creates nothing. The same key from the other tenant is not a replay (keys are scoped per
	// principal): it is that tenant's own create, refused here for want of GPUs, never the first
	// tenant's instance.
	for i, a := range answers {
		if a.status != http.StatusCreated {
			continue
		}
		again := create(t, rs[(a.replica+1)%2].url, tenantKeys[a.tenant], a.key, it.ID)
		if again.inst.ID != a.inst.ID || (again.status != http.StatusCreated && again.status != http.StatusOK) {
			t.Fatalf("replay %d of %s on the other replica: %d %s, want instance %s", i, a.key, again.status, again.body, a.inst.ID)
		}
		other := create(t, rs[(a.replica+1)%2].url, tenantKeys[1-a.tenant], a.key, it.ID)
		if other.status != http.StatusServiceUnavailable || other.inst.ID != "" {
			t.Fatalf("another tenant's create with key %s: %d %s", a.key, other.status, other.body)
		}
	}
	if err := rs[1].st.Pool.QueryRow(ctx, `SELECT count(*) FROM instances`).Scan(&instances); err != nil || instances != gpus {
		t.Fatalf("after replays: %d instances (%v), want %d", instances, err, gpus)
	}
}

// concurrently runs f(0..n-1) at once (released together) and returns their answers.
func concurrently(n int, f func(i int) answer) []answer {
	out := make([]answer, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out[i] = f(i)
		}()
	}
	close(start)
	wg.Wait()
	return out
}
