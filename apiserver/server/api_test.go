package server_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"gpucloud/apiserver/server"
	"gpucloud/apiserver/store"
)

func TestAuthentication(t *testing.T) {
	e := newEnv(t)
	// No key, malformed header, unknown key: 401 problem documents.
	for _, c := range []struct{ name, hdr string }{
		{"no key", ""}, {"not bearer", "Basic abc"}, {"unknown key", "Bearer gcu_doesnotexist"}, {"unknown prefix", "Bearer xyz"},
	} {
		req, _ := http.NewRequest("GET", e.url+"/v1/instances", nil)
		if c.hdr != "" {
			req.Header.Set("Authorization", c.hdr)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: status %d %q, want 401 problem", c.name, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}
	// A working key stops working once revoked.
	var me server.Me
	e.must(200, "GET", "/v1/me", e.tenantA.Key, nil, &me)
	var newKey server.NewAPIKey
	e.must(201, "POST", "/v1/users/"+me.UserID.String()+"/api-keys", e.tenantA.Key, map[string]string{"name": "ci"}, &newKey)
	if !strings.HasPrefix(newKey.Secret, store.PrefixUserKey) {
		t.Fatalf("secret %q lacks prefix", newKey.Secret)
	}
	e.must(200, "GET", "/v1/instances", newKey.Secret, nil, nil)
	e.must(204, "DELETE", "/v1/api-keys/"+newKey.ID.String(), e.tenantA.Key, nil, nil)
	e.must(401, "GET", "/v1/instances", newKey.Secret, nil, nil)
	// The original key still works, and the stored hash is not the secret.
	e.must(200, "GET", "/v1/instances", e.tenantA.Key, nil, nil)
	var page server.Page[store.APIKey]
	e.must(200, "GET", "/v1/users/"+me.UserID.String()+"/api-keys", e.tenantA.Key, nil, &page)
	if len(page.Items) != 2 || page.Items[1].RevokedAt == nil {
		t.Fatalf("keys after revoke: %+v", page.Items)
	}
	// Use is recorded (asynchronously, at most once a minute per key).
	for deadline := time.Now().Add(5 * time.Second); page.Items[0].LastUsedAt == nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("last-used time never recorded")
		}
		e.must(200, "GET", "/v1/users/"+me.UserID.String()+"/api-keys", e.tenantA.Key, nil, &page)
	}
}

func TestRoles(t *testing.T) {
	e := newEnv(t)
	// A tenant admin invites a member; the member cannot do operator or admin work.
	var member store.User
	e.must(201, "POST", "/v1/users", e.tenantA.Key, map[string]any{"email": "m@a.example", "role": "tenant-member", "tenant_id": e.tenantA.ID}, &member)
	var key server.NewAPIKey
	e.must(201, "POST", "/v1/users/"+member.ID.String()+"/api-keys", e.tenantA.Key, map[string]string{}, &key)
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{"POST", "/v1/tenants", map[string]any{"name": "evil", "quota_instances": 1}},
		{"POST", "/v1/hosts", map[string]string{"name": "h"}},
		{"GET", "/v1/hosts", nil},
		{"POST", "/v1/instance-types", map[string]any{"name": "x"}},
		{"PUT", "/v1/tenants/" + e.tenantA.ID + "/quota", map[string]any{"instances": 99}},
		{"POST", "/v1/users", map[string]any{"email": "x@a.example", "role": "tenant-member", "tenant_id": e.tenantA.ID}},
		{"GET", "/v1/agent/host/instances", nil},
	} {
		status, _, body := e.call(c.method, c.path, key.Secret, c.body, nil)
		if status != 403 || problemOf(t, body)["type"] != "forbidden" {
			t.Errorf("member %s %s: %d %s, want 403", c.method, c.path, status, body)
		}
	}
	// A tenant admin cannot make operators, nor invite into another tenant.
	status, _, _ := e.call("POST", "/v1/users", e.tenantA.Key, map[string]any{"email": "o@a.example", "role": "operator"}, nil)
	if status != 403 {
		t.Errorf("tenant admin creating an operator: %d", status)
	}
	status, _, body := e.call("POST", "/v1/users", e.tenantA.Key, map[string]any{"email": "x@b.example", "role": "tenant-member", "tenant_id": e.tenantB.ID}, nil)
	if status != 400 || !strings.Contains(string(body), "tenant_id") {
		t.Errorf("tenant admin inviting into tenant B: %d %s", status, body)
	}
	// A daemon credential is not a user's.
	hostKey := e.host("h1", 64, 1<<20)
	e.must(403, "GET", "/v1/instances", hostKey, nil, nil)
	// The operator may.
	e.must(200, "PUT", "/v1/tenants/"+e.tenantA.ID+"/quota", e.operator, map[string]any{"instances": 5, "gpus": 1, "gpu_memory_bytes": 0}, nil)
}

func TestTenantIsolation(t *testing.T) {
	e := newEnv(t)
	e.host("h1", 64, 1<<20)
	e.gpuServer("g1", 4)
	status, a, body := e.create(e.tenantA.Key, "a-vm", e.dedType)
	if status != 201 {
		t.Fatalf("create: %d %s", status, body)
	}
	_, b, _ := e.create(e.tenantB.Key, "b-vm", e.cpuType)
	id := a.ID.String()
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/instances/" + id}, {"GET", "/v1/instances/" + id + "/events"}, {"POST", "/v1/instances/" + id + "/stop"},
		{"POST", "/v1/instances/" + id + "/reboot"}, {"DELETE", "/v1/instances/" + id}, {"GET", "/v1/tenants/" + e.tenantA.ID},
	} {
		status, _, body := e.call(c.method, c.path, e.tenantB.Key, nil, nil)
		if status != 404 {
			t.Errorf("tenant B %s %s: %d %s, want 404", c.method, c.path, status, body)
		}
	}
	var page server.Page[store.Instance]
	e.must(200, "GET", "/v1/instances", e.tenantB.Key, nil, &page)
	if len(page.Items) != 1 || page.Items[0].ID != b.ID {
		t.Fatalf("tenant B sees %+v, want only its own instance", page.Items)
	}
	// The instance is untouched by B's attempts, and the operator sees both.
	var got store.Instance
	e.must(200, "GET", "/v1/instances/"+id, e.tenantA.Key, nil, &got)
	if got.State != store.StatePending {
		t.Fatalf("A's instance is %s after B's attempts", got.State)
	}
	e.must(200, "GET", "/v1/instances", e.operator, nil, &page)
	if len(page.Items) != 2 {
		t.Fatalf("operator sees %d instances", len(page.Items))
	}
	// Users, keys and the audit log are tenant-scoped too.
	var users server.Page[store.User]
	e.must(200, "GET", "/v1/users", e.tenantB.Key, nil, &users)
	var aAdmin string
	for _, u := range users.Items {
		if u.TenantID == nil || u.TenantID.String() != e.tenantB.ID {
			t.Fatalf("tenant B lists user %+v", u)
		}
	}
	var all server.Page[store.User]
	e.must(200, "GET", "/v1/users?tenant_id="+e.tenantA.ID, e.operator, nil, &all)
	if len(all.Items) != 1 {
		t.Fatalf("operator sees %d users of tenant A", len(all.Items))
	}
	aAdmin = all.Items[0].ID.String()
	e.must(404, "GET", "/v1/users/"+aAdmin, e.tenantB.Key, nil, nil)
	e.must(404, "POST", "/v1/users/"+aAdmin+"/api-keys", e.tenantB.Key, map[string]string{}, nil)
	var audit server.AuditPage
	e.must(200, "GET", "/v1/audit-events?limit=200", e.tenantB.Key, nil, &audit)
	for _, a := range audit.Items {
		if a.TenantID == nil || a.TenantID.String() != e.tenantB.ID {
			t.Fatalf("tenant B's audit log shows %+v", a)
		}
	}
}

func TestIdempotentCreate(t *testing.T) {
	e := newEnv(t)
	e.host("h1", 64, 1<<20)
	body := map[string]string{"name": "vm", "instance_type_id": e.cpuType, "image": "ubuntu"}
	var first, second store.Instance
	e.must(201, "POST", "/v1/instances", e.tenantA.Key, body, &first, "Idempotency-Key", "k1")
	status, hdr, _ := e.call("POST", "/v1/instances", e.tenantA.Key, body, &second, "Idempotency-Key", "k1")
	if status != 201 || second.ID != first.ID || hdr.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %s vs %s", status, second.ID, first.ID)
	}
	other := map[string]string{"name": "vm2", "instance_type_id": e.cpuType, "image": "ubuntu"}
	status, _, raw := e.call("POST", "/v1/instances", e.tenantA.Key, other, nil, "Idempotency-Key", "k1")
	if status != 422 || problemOf(t, raw)["type"] != "idempotency-key-reused" {
		t.Fatalf("same key, other body: %d %s", status, raw)
	}
	// Keys are per principal: tenant B's k1 is a new request.
	var third store.Instance
	e.must(201, "POST", "/v1/instances", e.tenantB.Key, body, &third, "Idempotency-Key", "k1")
	var page server.Page[store.Instance]
	e.must(200, "GET", "/v1/instances", e.tenantA.Key, nil, &page)
	if len(page.Items) != 1 {
		t.Fatalf("tenant A has %d instances after a replayed create", len(page.Items))
	}
	// Concurrent requests with one key create one instance and all get its answer.
	ids := make(chan string, 8)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var inst store.Instance
			status, _, raw := e.call("POST", "/v1/instances", e.tenantA.Key, map[string]string{"name": "conc", "instance_type_id": e.cpuType, "image": "u"}, &inst, "Idempotency-Key", "k2")
			if status != 201 {
				t.Errorf("concurrent same-key create: %d %s", status, raw)
			}
			ids <- inst.ID.String()
		}()
	}
	wg.Wait()
	close(ids)
	distinct := map[string]bool{}
	for id := range ids {
		distinct[id] = true
	}
	e.must(200, "GET", "/v1/instances", e.tenantA.Key, nil, &page)
	if len(distinct) != 1 || len(page.Items) != 2 {
		t.Fatalf("8 same-key creates gave ids %v and %d instances", distinct, len(page.Items))
	}
	// A refused create is not recorded: the same key works once the quota allows it.
	e.must(200, "PUT", "/v1/tenants/"+e.tenantA.ID+"/quota", e.operator, map[string]any{"instances": 2, "gpus": 0, "gpu_memory_bytes": 0}, nil)
	again := map[string]string{"name": "third", "instance_type_id": e.cpuType, "image": "u"}
	e.must(403, "POST", "/v1/instances", e.tenantA.Key, again, nil, "Idempotency-Key", "k3")
	e.must(200, "PUT", "/v1/tenants/"+e.tenantA.ID+"/quota", e.operator, map[string]any{"instances": 3, "gpus": 0, "gpu_memory_bytes": 0}, nil)
	e.must(201, "POST", "/v1/instances", e.tenantA.Key, again, nil, "Idempotency-Key", "k3")
	// Other POSTs keep the general mechanism: a repeated API key create returns the same key,
	// but never its secret again (secrets are not stored).
	var me server.Me
	e.must(200, "GET", "/v1/me", e.tenantA.Key, nil, &me)
	var k1, k2 server.NewAPIKey
	e.must(201, "POST", "/v1/users/"+me.UserID.String()+"/api-keys", e.tenantA.Key, map[string]string{"name": "x"}, &k1, "Idempotency-Key", "k4")
	e.must(201, "POST", "/v1/users/"+me.UserID.String()+"/api-keys", e.tenantA.Key, map[string]string{"name": "x"}, &k2, "Idempotency-Key", "k4")
	if k1.ID != k2.ID || k1.Secret == "" || k2.Secret != "" {
		t.Fatalf("replayed key create: first %s %q, replay %s %q", k1.ID, k1.Secret, k2.ID, k2.Secret)
	}
	var stored int
	if err := e.st.Pool.QueryRow(t.Context(), `SELECT count(*) FROM idempotency_keys WHERE strpos(convert_from(body, 'UTF8'), $1) > 0`, k1.Secret).Scan(&stored); err != nil || stored != 0 {
		t.Fatalf("secret stored in %d idempotency records (%v)", stored, err)
	}
}

func TestQuotaExceeded(t *testing.T) {
	e := newEnv(t)
	e.host("h1", 64, 1<<20)
	e.gpuServer("g1", 8)
	e.must(200, "PUT", "/v1/tenants/"+e.tenantA.ID+"/quota", e.operator, map[string]any{"instances": 3, "gpus": 1, "gpu_memory_bytes": 100 * gib}, nil)
	if s, _, b := e.create(e.tenantA.Key, "one", e.dedType); s != 201 {
		t.Fatalf("first: %d %s", s, b)
	}
	s, _, b := e.create(e.tenantA.Key, "two", e.dedType)
	p := problemOf(t, b)
	if s != 403 || p["type"] != "quota-exceeded" || !strings.Contains(p["detail"].(string), "gpus quota") {
		t.Fatalf("second GPU: %d %s", s, b)
	}
	e.must(200, "PUT", "/v1/tenants/"+e.tenantA.ID+"/quota", e.operator, map[string]any{"instances": 2, "gpus": 10, "gpu_memory_bytes": 1000 * gib}, nil)
	if s, _, b := e.create(e.tenantA.Key, "two", e.cpuType); s != 201 {
		t.Fatalf("second: %d %s", s, b)
	}
	s, _, b = e.create(e.tenantA.Key, "three", e.cpuType)
	if s != 403 || !strings.Contains(string(b), "instances quota") {
		t.Fatalf("third: %d %s", s, b)
	}
	// The refused creates reserved nothing.
	var ten store.Tenant
	e.must(200, "GET", "/v1/tenants/"+e.tenantA.ID, e.tenantA.Key, nil, &ten)
	if ten.UsedInstances != 2 || ten.UsedGPUs != 1 || ten.UsedGPUMemoryBytes != 80*gib {
		t.Fatalf("usage %+v", ten)
	}
	var reserved int64
	if err := e.st.Pool.QueryRow(t.Context(), `SELECT sum(reserved_bytes) FROM gpus`).Scan(&reserved); err != nil || reserved != 80*gib {
		t.Fatalf("reserved %d bytes (%v), want one GPU", reserved, err)
	}
}

func TestBadInput(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		name   string
		body   []byte
		status int
		typ    string
		field  string
	}{
		{"malformed", []byte(`{"name": "x",`), 400, "malformed-json", ""},
		{"empty", []byte(``), 400, "malformed-json", ""},
		{"not an object", []byte(`[1,2]`), 400, "validation-failed", "body"},
		{"wrong type", []byte(`{"name": 5}`), 400, "validation-failed", "name"},
		{"unknown field", []byte(`{"name": "x", "gpus": 3}`), 400, "validation-failed", "gpus"},
		{"bad name", []byte(`{"name": "Bad Name!", "instance_type_id": "` + e.cpuType + `", "image": "u"}`), 400, "validation-failed", "name"},
		{"missing type", []byte(`{"name": "ok", "image": "u"}`), 400, "validation-failed", "instance_type_id"},
		{"bad uuid", []byte(`{"name": "ok", "instance_type_id": "nope", "image": "u"}`), 400, "malformed-json", ""},
		{"no such type", []byte(`{"name": "ok", "instance_type_id": "0190c0de-0000-7000-8000-000000000000", "image": "u"}`), 400, "validation-failed", "instance_type_id"},
		{"bad ssh key", []byte(`{"name": "ok", "instance_type_id": "` + e.cpuType + `", "image": "u", "ssh_key": "hello"}`), 400, "validation-failed", "ssh_key"},
		{"trailing", []byte(`{"name": "ok"} {}`), 400, "malformed-json", ""},
	} {
		status, _, body := e.call("POST", "/v1/instances", e.tenantA.Key, c.body, nil)
		p := problemOf(t, body)
		if status != c.status || p["type"] != c.typ {
			t.Errorf("%s: %d %s, want %d %s", c.name, status, body, c.status, c.typ)
			continue
		}
		if c.field != "" {
			fs, _ := p["fields"].([]any)
			if len(fs) == 0 || fs[0].(map[string]any)["field"] != c.field {
				t.Errorf("%s: fields %v, want %s named", c.name, p["fields"], c.field)
			}
		}
	}
	// Several bad fields are all named.
	status, _, body := e.call("POST", "/v1/instance-types", e.operator, map[string]any{"name": "", "vcpus": 0, "memory_mib": 1, "disk_gib": 1, "tier": "gold", "price_per_hour": -1}, nil)
	p := problemOf(t, body)
	if status != 400 || len(p["fields"].([]any)) != 4 {
		t.Fatalf("instance type: %d %s", status, body)
	}
	// Nothing was created by any of it.
	var page server.Page[store.Instance]
	e.must(200, "GET", "/v1/instances", e.tenantA.Key, nil, &page)
	if len(page.Items) != 0 {
		t.Fatalf("bad input created %d instances", len(page.Items))
	}
	// Bad pagination arguments and ids.
	e.must(400, "GET", "/v1/instances?limit=0", e.tenantA.Key, nil, nil)
	e.must(400, "GET", "/v1/instances?cursor=!!", e.tenantA.Key, nil, nil)
	e.must(404, "GET", "/v1/instances/not-a-uuid", e.tenantA.Key, nil, nil)
}

func TestPaginationAndRequestID(t *testing.T) {
	e := newEnv(t)
	e.host("h1", 64, 1<<20)
	for i := 0; i < 5; i++ {
		if s, _, b := e.create(e.tenantA.Key, "vm-"+string(rune('a'+i)), e.cpuType); s != 201 {
			t.Fatal(s, string(b))
		}
	}
	seen := map[string]bool{}
	cursor := ""
	for pages := 0; ; pages++ {
		var p server.Page[store.Instance]
		e.must(200, "GET", "/v1/instances?limit=2&cursor="+cursor, e.tenantA.Key, nil, &p)
		for _, i := range p.Items {
			if seen[i.ID.String()] {
				t.Fatalf("instance %s on two pages", i.ID)
			}
			seen[i.ID.String()] = true
		}
		if p.NextCursor == "" {
			break
		}
		if pages > 5 {
			t.Fatal("pagination does not end")
		}
		cursor = p.NextCursor
	}
	if len(seen) != 5 {
		t.Fatalf("paged through %d of 5", len(seen))
	}
	_, hdr, _ := e.call("GET", "/v1/me", e.tenantA.Key, nil, nil, "X-Request-ID", "req-123")
	if hdr.Get("X-Request-ID") != "req-123" {
		t.Fatalf("request id %q", hdr.Get("X-Request-ID"))
	}
	_, hdr, body := e.call("GET", "/v1/instances/0190c0de-0000-7000-8000-000000000000", e.tenantA.Key, nil, nil)
	if id := hdr.Get("X-Request-ID"); id == "" || problemOf(t, body)["request_id"] != id {
		t.Fatalf("generated request id %q not in problem %s", id, body)
	}
	// The audit log recorded the creates with who and which request.
	var audit server.AuditPage
	e.must(200, "GET", "/v1/audit-events?limit=200", e.tenantA.Key, nil, &audit)
	creates := 0
	for _, a := range audit.Items {
		if a.ResourceType == "instance" && a.Action == "create" {
			creates++
			if a.ActorUserID == nil || a.RequestID == "" || a.TenantID == nil || a.TenantID.String() != e.tenantA.ID {
				t.Fatalf("audit entry %+v lacks who/request", a)
			}
		}
		if a.TenantID == nil || a.TenantID.String() != e.tenantA.ID {
			t.Fatalf("tenant A's audit log shows %+v", a)
		}
	}
	if creates != 5 {
		t.Fatalf("%d instance creates audited", creates)
	}
}

// A key revoked behind the store's back (straight in the database, so no NOTIFY) stops working
// within the key cache's lifetime (2 s) even with the cache on (newEnv runs the listener): the
// TTL is the backstop.
// Revocations through the store reach every replica at once (deploy/manifests/keynotify_test.go).
func TestKeyRevokedElsewhereExpires(t *testing.T) {
	e := newEnv(t)
	for i := 0; !e.st.KeyCacheLive(); i++ {
		if i == 250 {
			t.Fatal("credentials listener never connected")
		}
		time.Sleep(20 * time.Millisecond)
	}
	var me server.Me
	e.must(200, "GET", "/v1/me", e.tenantA.Key, nil, &me)
	var k server.NewAPIKey
	e.must(201, "POST", "/v1/users/"+me.UserID.String()+"/api-keys", e.tenantA.Key, map[string]string{"name": "ci"}, &k)
	e.must(200, "GET", "/v1/me", k.Secret, nil, nil) // resolved, now cached
	if e.st.KeyCacheSize() == 0 {
		t.Fatal("the key cache is on but cached nothing")
	}
	if _, err := e.st.Pool.Exec(t.Context(), `UPDATE api_keys SET revoked_at = now() WHERE id = $1`, k.ID); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	for {
		s, _, _ := e.call("GET", "/v1/me", k.Secret, nil, nil)
		if s == 401 {
			break
		}
		if time.Since(revoked) > 5*time.Second {
			t.Fatalf("key revoked elsewhere still accepted after %v (status %d)", time.Since(revoked), s)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
