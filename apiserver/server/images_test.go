package server_test

import (
	"strings"
	"testing"

	"gpucloud/api"
	"gpucloud/apiserver/server"
	"gpucloud/apiserver/store"
)

// Operators register images, tenants list them (without their source), a create naming an
// unknown image or one too big for the type's disk is refused naming the field, and the host
// gets the source and checksum to fetch and verify.
func TestImages(t *testing.T) {
	e := newEnv(t)
	hostKey := e.host("h1", 32, 65536)
	e.image("big-disk", 500)

	for _, c := range []struct {
		name, field string
		body        map[string]any
	}{
		{"bad name", "name", map[string]any{"name": "Ubuntu 24", "source": "file:///x.qcow2", "sha256": strings.Repeat("a", 64), "min_disk_gib": 1}},
		{"relative file", "source", map[string]any{"name": "x", "source": "file://x.qcow2", "sha256": strings.Repeat("a", 64), "min_disk_gib": 1}},
		{"ftp", "source", map[string]any{"name": "x", "source": "ftp://h/x.qcow2", "sha256": strings.Repeat("a", 64), "min_disk_gib": 1}},
		{"short sum", "sha256", map[string]any{"name": "x", "source": "https://h/x.qcow2", "sha256": "abc", "min_disk_gib": 1}},
		{"no disk", "min_disk_gib", map[string]any{"name": "x", "source": "https://h/x.qcow2", "sha256": strings.Repeat("a", 64)}},
	} {
		status, _, body := e.call("POST", "/v1/images", e.operator, c.body, nil)
		if p := problemOf(t, body); status != 400 || !strings.Contains(string(body), `"field":"`+c.field+`"`) {
			t.Errorf("%s: %d %v", c.name, status, p)
		}
	}
	e.must(403, "POST", "/v1/images", e.tenantA.Key, map[string]any{"name": "mine", "source": "https://h/x", "sha256": strings.Repeat("a", 64), "min_disk_gib": 1}, nil)
	e.must(409, "POST", "/v1/images", e.operator, map[string]any{"name": "u", "source": "https://h/x", "sha256": strings.Repeat("a", 64), "min_disk_gib": 1}, nil)

	var list server.Page[store.Image]
	e.must(200, "GET", "/v1/images", e.tenantA.Key, nil, &list)
	var names []string
	for _, m := range list.Items {
		names = append(names, m.Name)
		if m.Source != "" || len(m.SHA256) != 64 {
			t.Fatalf("tenant sees %+v", m)
		}
	}
	if strings.Join(names, ",") != "big-disk,u,ubuntu,ubuntu-24.04" {
		t.Fatalf("images %v", names)
	}

	status, _, body := e.call("POST", "/v1/instances", e.tenantA.Key, map[string]string{"name": "vm", "instance_type_id": e.cpuType, "image": "debian-13"}, nil)
	if status != 400 || !strings.Contains(string(body), `"field":"image"`) || !strings.Contains(string(body), "debian-13") {
		t.Fatalf("unknown image: %d %s", status, body)
	}
	status, _, body = e.call("POST", "/v1/instances", e.tenantA.Key, map[string]string{"name": "vm", "instance_type_id": e.cpuType, "image": "big-disk"}, nil)
	if status != 400 || !strings.Contains(string(body), `"field":"image"`) || !strings.Contains(string(body), "500 GiB") {
		t.Fatalf("image bigger than the type's disk: %d %s", status, body)
	}
	var n int
	if err := e.st.Pool.QueryRow(t.Context(), `SELECT count(*) FROM instances`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("refused creates left %d instances (%v)", n, err)
	}

	// The host learns where to fetch the image and what it must hash to, even after the image
	// is retired (the instance keeps it); new creates can no longer name it.
	status, inst, body := e.create(e.tenantA.Key, "vm", e.cpuType)
	if status != 201 {
		t.Fatalf("create: %d %s", status, body)
	}
	var u store.Image
	for _, m := range list.Items {
		if m.Name == "ubuntu-24.04" {
			u = m
		}
	}
	e.must(403, "DELETE", "/v1/images/"+u.ID.String(), e.tenantA.Key, nil, nil)
	e.must(204, "DELETE", "/v1/images/"+u.ID.String(), e.operator, nil, nil)
	var desired api.DesiredInstances
	e.must(200, "GET", "/v1/agent/host/instances", hostKey, nil, &desired)
	if len(desired.Instances) != 1 || desired.Instances[0].ID != inst.ID.String() ||
		desired.Instances[0].Spec.ImageSource != "file:///var/lib/gpucloud/images/ubuntu-24.04.qcow2" || desired.Instances[0].Spec.ImageSHA256 != u.SHA256 {
		t.Fatalf("desired %+v", desired.Instances)
	}
	if status, _, _ := e.create(e.tenantA.Key, "vm2", e.cpuType); status != 400 {
		t.Fatalf("create from a retired image: %d", status)
	}
}
