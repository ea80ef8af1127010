package server_test

import (
	"sync"
	"testing"

	"gpucloud/apiserver/store"
)

// 100 concurrent creates through the real HTTP stack compete for 10 free GPUs: exactly 10 are
// placed, 90 are refused as retryable no-capacity, and no GPU is reserved twice.
func TestConcurrentCreatesNeverOversubscribe(t *testing.T) {
	e := newEnv(t)
	e.host("h1", 1000, 1<<24)
	e.host("h2", 1000, 1<<24)
	e.gpuServer("g1", 6)
	e.gpuServer("g2", 4)

	const n = 100
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		placed   []store.Instance
		refused  int
		statuses = map[int]int{}
	)
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
			status, inst, body := e.create(key, "vm", e.dedType)
			mu.Lock()
			defer mu.Unlock()
			statuses[status]++
			switch status {
			case 201:
				placed = append(placed, inst)
			case 503:
				if p := problemOf(t, body); p["type"] != "no-capacity" || p["retryable"] != true {
					t.Errorf("refusal %s", body)
				}
				refused++
			}
		}(i)
	}
	close(start)
	wg.Wait()
	if len(placed) != 10 || refused != 90 {
		t.Fatalf("placed %d, refused %d (statuses %v); want 10 and 90", len(placed), refused, statuses)
	}
	// Every GPU is reserved exactly once, wholly, and each placed instance holds one.
	rows, err := e.st.Pool.Query(t.Context(), `SELECT g.uuid, g.reserved_bytes, g.memory_bytes, count(r.instance_id)
		FROM gpus g LEFT JOIN gpu_reservations r ON r.gpu_id = g.id GROUP BY g.id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	gpus := 0
	for rows.Next() {
		var uuid string
		var reserved, mem, count int64
		if err := rows.Scan(&uuid, &reserved, &mem, &count); err != nil {
			t.Fatal(err)
		}
		gpus++
		if count != 1 || reserved != mem {
			t.Errorf("GPU %s: %d reservations, %d of %d bytes reserved", uuid, count, reserved, mem)
		}
	}
	if gpus != 10 {
		t.Fatalf("%d GPUs", gpus)
	}
	var instances, usedGPUs int
	if err := e.st.Pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM instances), (SELECT sum(used_gpus) FROM tenants)`).
		Scan(&instances, &usedGPUs); err != nil {
		t.Fatal(err)
	}
	if instances != 10 || usedGPUs != 10 {
		t.Fatalf("%d instance rows, %d GPUs charged to quotas; want 10 and 10", instances, usedGPUs)
	}
}

// Shared slices pack onto GPUs without exceeding their memory.
func TestSharedSlicesFillGPUExactly(t *testing.T) {
	e := newEnv(t)
	e.host("h1", 1000, 1<<24)
	e.gpuServer("g1", 1) // 80 GiB; the shared tier's slice is 10 GiB: 8 fit
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	for i := 0; i < 12; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if s, _, _ := e.create(e.tenantA.Key, "s", e.shrType); s == 201 {
				mu.Lock()
				ok++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	var reserved int64
	if err := e.st.Pool.QueryRow(t.Context(), `SELECT reserved_bytes FROM gpus`).Scan(&reserved); err != nil {
		t.Fatal(err)
	}
	if int64(ok)*10*gib != reserved || reserved > 80*gib || ok == 0 {
		t.Fatalf("%d shared instances placed, %d bytes reserved", ok, reserved)
	}
	// Once full, a dedicated request for that GPU is refused.
	if s, _, b := e.create(e.tenantA.Key, "d", e.dedType); s != 503 {
		t.Fatalf("dedicated on a shared GPU: %d %s", s, b)
	}
}

// A new shared slice size applies to the next creates; existing reservations keep theirs.
func TestSharedSliceChange(t *testing.T) {
	e := newEnv(t)
	e.host("h1", 1000, 1<<24)
	e.gpuServer("g1", 1)
	if s, _, b := e.create(e.tenantA.Key, "a", e.shrType); s != 201 {
		t.Fatal(s, string(b))
	}
	e.must(400, "PUT", "/v1/tiers/shared", e.operator, map[string]any{"memory_slice_bytes": 0}, nil)
	e.must(403, "PUT", "/v1/tiers/shared", e.tenantA.Key, map[string]any{"memory_slice_bytes": 40 * gib}, nil)
	e.must(200, "PUT", "/v1/tiers/shared", e.operator, map[string]any{"memory_slice_bytes": 40 * gib}, nil)
	s, inst, b := e.create(e.tenantA.Key, "b", e.shrType)
	if s != 201 || inst.GPUMemoryBytes != 40*gib {
		t.Fatalf("after the change: %d %s", s, b)
	}
	// 10 + 40 GiB of 80 are taken: another 40 GiB slice does not fit.
	if s, _, b := e.create(e.tenantA.Key, "c", e.shrType); s != 503 {
		t.Fatalf("third slice: %d %s", s, b)
	}
}
