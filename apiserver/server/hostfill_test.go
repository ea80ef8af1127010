package server_test

import (
	"testing"

	"gpucloud/apiserver/store"
)

// Hosts fill up under concurrent creates: the create path picks hosts from a short-lived list
// (which soon names full hosts) and must then fall back to walking the current candidates.
// Exactly the room there is gets used, never more, and the rest is refused as no-capacity.
func TestConcurrentCreatesFillHostsExactly(t *testing.T) {
	e := newEnv(t)
	// cpuType needs 2 vCPUs: room for 2 + 3 + 1 instances.
	e.host("h1", 4, 1<<20)
	e.host("h2", 6, 1<<20)
	e.host("h3", 2, 1<<20)

	const n = 30
	statuses := map[int]int{}
	e.createAll(n, e.cpuType, func(status int, _ store.Instance, body []byte) {
		statuses[status]++
		if status == 503 {
			if p := problemOf(t, body); p["type"] != "no-capacity" {
				t.Errorf("refusal %s", body)
			}
		}
	})
	if statuses[201] != 6 || statuses[503] != n-6 {
		t.Fatalf("statuses %v; want 6 created and %d refused", statuses, n-6)
	}
	rows, err := e.st.Pool.Query(t.Context(), `SELECT h.hostname, h.vcpus, h.used_vcpus, count(i.id)
		FROM hosts h LEFT JOIN instances i ON i.host_id = h.id GROUP BY h.id ORDER BY h.hostname`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var vcpus, used, instances int
		if err := rows.Scan(&name, &vcpus, &used, &instances); err != nil {
			t.Fatal(err)
		}
		if used != vcpus || instances*2 != used {
			t.Errorf("host %s: %d vCPUs, %d used, %d instances; want it exactly full", name, vcpus, used, instances)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

// A host cordoned after the create path listed it gets no new instance.
func TestCordonedHostLeftOutAtOnce(t *testing.T) {
	e := newEnv(t)
	e.host("h1", 100, 1<<20)
	e.host("h2", 100, 1<<20)
	if s, _, b := e.create(e.tenantA.Key, "first", e.cpuType); s != 201 { // lists both hosts
		t.Fatalf("create: %d %s", s, b)
	}
	var h1 string
	if err := e.st.Pool.QueryRow(t.Context(), `SELECT id::text FROM hosts WHERE hostname = 'h1'`).Scan(&h1); err != nil {
		t.Fatal(err)
	}
	e.must(200, "POST", "/v1/hosts/"+h1+"/cordon", e.operator, nil, nil)
	for i := 0; i < 10; i++ {
		s, inst, b := e.create(e.tenantA.Key, "vm", e.cpuType)
		if s != 201 {
			t.Fatalf("create %d: %d %s", i, s, b)
		}
		if inst.HostID.String() == h1 {
			t.Fatalf("create %d placed on cordoned host h1", i)
		}
	}
}
