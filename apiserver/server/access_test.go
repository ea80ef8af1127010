package server_test

import (
	"strings"
	"testing"

	"gpucloud/api"
	"gpucloud/apiserver/server"
	"gpucloud/apiserver/store"
)

// The host's forwarded ports become the instance's SSH command and port list; its console tail
// is served to its tenant only, and every read is audited.
func TestSSHEndpointAndConsole(t *testing.T) {
	e := newEnv(t)
	hostKey := e.host("h1", 32, 65536)
	for _, bad := range []any{[]int{22}, []int{80, 80}, []int{1, 2, 3, 4, 5}, []int{70000}} {
		status, _, body := e.call("POST", "/v1/instances", e.tenantA.Key, map[string]any{"name": "vm", "instance_type_id": e.cpuType, "image": "u", "forward_ports": bad}, nil)
		if status != 400 || !strings.Contains(string(body), `"field":"forward_ports"`) {
			t.Errorf("forward_ports %v: %d %s", bad, status, body)
		}
	}
	var inst store.Instance
	e.must(201, "POST", "/v1/instances", e.tenantA.Key, map[string]any{"name": "vm", "instance_type_id": e.cpuType, "image": "u", "forward_ports": []int{8888}}, &inst)
	id := inst.ID.String()
	if inst.SSH != nil {
		t.Fatalf("SSH endpoint before the host forwarded anything: %+v", inst.SSH)
	}
	var desired api.DesiredInstances
	e.must(200, "GET", "/v1/agent/host/instances", hostKey, nil, &desired)
	if got := desired.Instances[0].Spec.ForwardPorts; len(got) != 1 || got[0] != 8888 {
		t.Fatalf("host is asked to forward %v", got)
	}
	e.must(400, "PUT", "/v1/agent/host/instances/"+id+"/status", hostKey, api.InstanceObserved{State: "running", PublicHost: "evil host"}, nil)
	e.must(204, "PUT", "/v1/agent/host/instances/"+id+"/status", hostKey, api.InstanceObserved{State: "running",
		PublicHost: "node1.example", Forwards: []api.PortForward{{GuestPort: 22, HostPort: 22001}, {GuestPort: 8888, HostPort: 22002}},
		ConsoleLogTail: "Booting...\nnode1 login: "}, nil)
	var got store.Instance
	e.must(200, "GET", "/v1/instances/"+id, e.tenantA.Key, nil, &got)
	if got.SSH == nil || got.SSH.Command != "ssh -p 22001 root@node1.example" || got.SSH.Port != 22001 || len(got.Ports) != 2 || got.Ports[1].HostPort != 22002 {
		t.Fatalf("access %+v %+v", got.SSH, got.Ports)
	}
	var log store.ConsoleLog
	e.must(200, "GET", "/v1/instances/"+id+"/console", e.tenantA.Key, nil, &log)
	if log.Log != "Booting...\nnode1 login: " || log.UpdatedAt == nil {
		t.Fatalf("console %+v", log)
	}
	e.must(404, "GET", "/v1/instances/"+id+"/console", e.tenantB.Key, nil, nil)
	// A report without a tail keeps the last one.
	e.must(204, "PUT", "/v1/agent/host/instances/"+id+"/status", hostKey, api.InstanceObserved{State: "running",
		PublicHost: "node1.example", Forwards: []api.PortForward{{GuestPort: 22, HostPort: 22001}}}, nil)
	e.must(200, "GET", "/v1/instances/"+id+"/console", e.tenantA.Key, nil, &log)
	if !strings.HasSuffix(log.Log, "login: ") {
		t.Fatalf("console after a report without a tail: %q", log.Log)
	}
	var audit server.AuditPage
	e.must(200, "GET", "/v1/audit-events?limit=200", e.operator, nil, &audit)
	n := 0
	for _, a := range audit.Items {
		if a.Action == "read-console" && a.ResourceID == id {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("%d console reads audited, want 2: %+v", n, audit.Items)
	}
}
