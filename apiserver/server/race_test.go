package server_test

import (
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
		placed   []store.Instance
		refused  int
		statuses = map[int]int{}
	)
	e.createAll(n, e.dedType, func(status int, inst store.Instance, body []byte) {
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
	})
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
	ok := 0
	e.createAll(12, e.shrType, func(status int, _ store.Instance, _ []byte) {
		if status == 201 {
			ok++
		}
	})
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
