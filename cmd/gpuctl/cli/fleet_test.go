package cli_test

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gpucloud/cmd/gpuctl/cli"
	"gpucloud/sdk"
	"gpucloud/sdk/sdktest"
)

func TestHostAndGPUServerCommands(t *testing.T) {
	h := newHarness(t)
	hostID, _ := h.e.Host(t, "h1", 16)
	gsID, _ := h.e.GPUServer(t, "g1", 2)

	var hosts []sdk.Host
	h.jsonOf(&hosts, "", "hosts", "list")
	if len(hosts) != 1 || hosts[0].ID != hostID || hosts[0].Status != "ready" || hosts[0].VCPUs != 16 {
		t.Fatalf("hosts %+v", hosts)
	}
	var host sdk.Host
	h.jsonOf(&host, "", "hosts", "cordon", hostID)
	if !host.Cordoned {
		t.Fatalf("cordon %+v", host)
	}
	if out := h.ok("", "hosts", "show", hostID); !strings.Contains(out, "cordoned") {
		t.Fatalf("show:\n%s", out)
	}
	// Cordoned: nothing can be placed.
	h.code(cli.ExitUnavailable, h.e.A.AdminKey, "instances", "create", "vm", "--type", h.e.CPU, "--image", "u")
	h.jsonOf(&host, "", "hosts", "uncordon", hostID)
	if host.Cordoned {
		t.Fatalf("uncordon %+v", host)
	}
	h.code(cli.ExitAuth, h.e.A.AdminKey, "hosts", "cordon", hostID)
	h.code(cli.ExitNotFound, "", "hosts", "show", "00000000-0000-0000-0000-000000000002")

	var d sdk.NewDaemon
	h.jsonOf(&d, "", "hosts", "create", "spare")
	if d.Credential == "" {
		t.Fatalf("create host %+v", d)
	}
	h.code(cli.ExitInvalid, "", "hosts", "create", "Bad Name")
	h.ok("", "hosts", "delete", d.ID)
	h.code(cli.ExitNotFound, "", "hosts", "show", d.ID)

	var gss []sdk.GPUServer
	h.jsonOf(&gss, "", "gpu-servers", "list")
	if len(gss) != 1 || gss[0].ID != gsID || len(gss[0].GPUs) != 2 {
		t.Fatalf("gpu servers %+v", gss)
	}
	var gpus []sdk.GPU
	h.jsonOf(&gpus, "", "gpu-servers", "gpus", gsID)
	if len(gpus) != 2 || gpus[1].UUID != "GPU-g1-1" || !gpus[0].Healthy {
		t.Fatalf("gpus %+v", gpus)
	}
	if out := h.ok("", "gpu-servers", "gpus", gsID); !strings.Contains(out, "0.0GiB/80.0GiB") {
		t.Fatalf("gpus table:\n%s", out)
	}
	var gs sdk.GPUServer
	h.jsonOf(&gs, "", "gpu-servers", "cordon", gsID)
	if !gs.Cordoned {
		t.Fatalf("cordon %+v", gs)
	}
	h.jsonOf(&gs, "", "gpu-servers", "uncordon", gsID)
	h.jsonOf(&gs, "", "gpu-servers", "show", gsID)
	if gs.Cordoned || gs.Endpoint != "g1:7000" {
		t.Fatalf("show %+v", gs)
	}
	h.code(cli.ExitNotFound, "", "gpu-servers", "gpus", hostID)
	h.code(cli.ExitAuth, h.e.B.AdminKey, "gpu-servers", "list")
}

// TestDrainWaitsUntilEmpty drains a host with three instances while a goroutine plays their
// owners and the host agent: after the drain starts, it deletes one instance at a time and the
// agent reports each deleted. The drain must not return before the last is gone.
func TestDrainWaitsUntilEmpty(t *testing.T) {
	h := newHarness(t)
	hostID, hc := h.e.Host(t, "h1", 32)
	other, _ := h.e.Host(t, "h2", 32)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go sdktest.PlayHost(ctx, t, hc)

	owner := h.e.Client(t, h.e.A.AdminKey)
	op := h.e.OperatorClient
	if _, err := op.CordonHost(ctx, other); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, n := range []string{"a", "b", "c"} {
		inst, err := owner.CreateInstance(ctx, sdk.CreateInstanceRequest{Name: n, InstanceTypeID: h.e.CPU, Image: "u"})
		if err != nil || inst.HostID != hostID {
			t.Fatalf("create %s: %+v %v", n, inst, err)
		}
		ids = append(ids, inst.ID)
	}
	if _, err := op.UncordonHost(ctx, other); err != nil {
		t.Fatal(err)
	}

	// The owners: wait for the drain to start, then delete one instance every 150 ms.
	var lastDelete atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if h, err := op.GetHost(ctx, hostID); err == nil && h.Draining {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		for _, id := range ids {
			time.Sleep(150 * time.Millisecond)
			if _, err := owner.DeleteInstance(ctx, id); err != nil && ctx.Err() == nil {
				t.Errorf("delete %s: %v", id, err)
			}
			lastDelete.Store(time.Now().UnixNano())
		}
	}()

	r := h.as("", "hosts", "drain", hostID, "--poll-interval", "20ms", "--timeout", "30s", "-o", "json")
	returned := time.Now().UnixNano()
	<-done
	if r.code != 0 {
		t.Fatalf("drain: exit %d\n%s%s", r.code, r.out, r.err)
	}
	if lastDelete.Load() == 0 || returned < lastDelete.Load() {
		t.Fatalf("drain returned before the last instance was deleted")
	}
	var counts []int
	for _, m := range regexp.MustCompile(`: (\d+) instances remain`).FindAllStringSubmatch(r.err, -1) {
		n, _ := strconv.Atoi(m[1])
		counts = append(counts, n)
	}
	// Progress starts at 3, only goes down, and ends at 0 (a slow poll may skip a count).
	ok := len(counts) >= 2 && counts[0] == 3 && counts[len(counts)-1] == 0 && strings.Contains(r.err, "is drained")
	for i := 1; ok && i < len(counts); i++ {
		ok = counts[i] < counts[i-1]
	}
	if !ok {
		t.Fatalf("progress %v:\n%s", counts, r.err)
	}
	for _, id := range ids {
		inst, err := owner.GetInstance(ctx, id)
		if err != nil || inst.State != sdk.StateDeleted {
			t.Fatalf("after drain %s: %+v %v", id, inst, err)
		}
	}
	var host sdk.Host
	h.jsonOf(&host, "", "hosts", "show", hostID)
	if !host.Draining || !host.Cordoned || host.UsedVCPUs != 0 {
		t.Fatalf("drained host %+v", host)
	}
	// Placement avoids the drained host.
	inst, err := owner.CreateInstance(ctx, sdk.CreateInstanceRequest{Name: "d", InstanceTypeID: h.e.CPU, Image: "u"})
	if err != nil || inst.HostID != other {
		t.Fatalf("placed on %s, want %s: %v", inst.HostID, other, err)
	}
	// A drain that cannot finish times out (exit 7) and says how many remain.
	errs := h.code(cli.ExitTimeout, "", "hosts", "drain", other, "--poll-interval", "20ms", "--timeout", "200ms")
	if !strings.Contains(errs, "1 instances remain") {
		t.Fatalf("timed-out drain: %s", errs)
	}
	h.code(cli.ExitAuth, h.e.A.AdminKey, "hosts", "drain", hostID)
	h.code(cli.ExitNotFound, "", "hosts", "drain", "00000000-0000-0000-0000-000000000003")
}
