package cli_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"gpucloud/api"
	"gpucloud/cmd/gpuctl/cli"
	"gpucloud/hostd/controlplane"
	"gpucloud/sdk"
)

// playMoveHost plays a hostd that takes part in host drains, on the real agent API: it reports
// its instances as wanted; as a move's source it says ready at once; as a target it reports the
// copy's progress over a few looks, then done.
func playMoveHost(ctx context.Context, cp *controlplane.HTTP) {
	copied := map[string]int64{}
	for ctx.Err() == nil {
		want, err := cp.DesiredInstances(ctx)
		for _, d := range want.Instances {
			if err != nil {
				break
			}
			switch {
			case d.Move == nil:
				cp.ReportInstance(ctx, d.ID, api.InstanceObserved{State: api.ObservedRunning})
			case d.Move.Role == api.MoveOut && d.Move.Phase == api.MovePending:
				cp.ReportMove(ctx, d.Move.ID, api.HostMoveReport{State: api.HostMoveReady, BytesTotal: 4 << 20})
			case d.Move.Role == api.MoveIn:
				if copied[d.Move.ID] += 1 << 20; copied[d.Move.ID] <= 4<<20 {
					cp.ReportMove(ctx, d.Move.ID, api.HostMoveReport{State: api.HostMoveCopying, BytesCopied: copied[d.Move.ID], BytesTotal: 4 << 20})
					continue
				}
				cp.ReportMove(ctx, d.Move.ID, api.HostMoveReport{State: api.HostMoveDone, BytesCopied: 4 << 20,
					Observed: &api.InstanceObserved{State: api.ObservedRunning, PublicHost: "h2.example", Forwards: []api.PortForward{{GuestPort: 22, HostPort: 22001}}}})
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(30 * time.Millisecond):
		}
	}
}

// TestHostDrainMoveShowsProgress drains a host with --move: the plan is printed at once, naming
// a VM with no room; --live on test-driver hosts names why not; with --wait gpuctl follows the
// copy and returns once the VM runs on the other host.
func TestHostDrainMoveShowsProgress(t *testing.T) {
	h := newHarness(t)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	op := h.e.OperatorClient
	var ids []string
	for _, name := range []string{"h1", "h2"} {
		d, err := op.CreateHost(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		cp, err := controlplane.NewHTTP(h.e.URL, d.Credential)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cp.Heartbeat(ctx, api.HostReport{Hostname: name, Hypervisor: "test:///default", TransferEndpoint: name + ":7443",
			Capacity: api.HostCapacity{VCPUs: 16, MemoryMiB: 65536, DiskGiB: 1000}}); err != nil {
			t.Fatal(err)
		}
		go playMoveHost(ctx, cp)
		ids = append(ids, d.ID)
	}
	h1, h2 := ids[0], ids[1]
	if _, err := op.CordonHost(ctx, h2); err != nil {
		t.Fatal(err)
	}
	owner := h.e.Client(t, h.e.A.AdminKey)
	inst, err := owner.CreateInstance(ctx, sdk.CreateInstanceRequest{Name: "vm", InstanceTypeID: h.e.CPU, Image: "u"})
	if err != nil || inst.HostID != h1 {
		t.Fatalf("create: %+v %v", inst, err)
	}

	for inst.State != sdk.StateRunning { // the played hostd starts it
		time.Sleep(20 * time.Millisecond)
		if inst, err = owner.GetInstance(ctx, inst.ID); err != nil {
			t.Fatal(err)
		}
	}
	// Nowhere to go: the plan names the VM with the reason; --wait fails.
	var moves []sdk.HostMove
	h.jsonOf(&moves, "", "hosts", "drain", h1, "--move", "-o", "json")
	if len(moves) != 1 || moves[0].State != "unplaced" || !strings.Contains(moves[0].Reason, "no capacity") {
		t.Fatalf("the plan with no room: %+v", moves)
	}
	if r := h.as("", "hosts", "drain", h1, "--move", "--wait", "--poll-interval", "20ms"); r.code != cli.ExitError ||
		!strings.Contains(r.err, "1 instance(s) stay") {
		t.Fatalf("drain --move --wait with no room: exit %d\n%s%s", r.code, r.out, r.err)
	}
	if _, err := op.UncordonHost(ctx, h2); err != nil {
		t.Fatal(err)
	}
	// --live: these hosts run libvirt's test driver, which cannot migrate; the reason says so.
	if out := h.ok("", "hosts", "drain", h1, "--move", "--live"); !strings.Contains(out, "test driver") || !strings.Contains(out, "unplaced") {
		t.Fatalf("drain --move --live:\n%s", out)
	}

	r := h.as("", "hosts", "drain", h1, "--move", "--wait", "--poll-interval", "20ms", "--timeout", "30s")
	if r.code != 0 || !strings.Contains(r.err, "copying") || !strings.Contains(r.err, "bytes copied") ||
		!strings.Contains(r.err, "1 done") || !strings.Contains(r.err, "its VMs moved") || !strings.Contains(r.out, "done") {
		moves, _ := op.GetHostDrain(ctx, h1)
		t.Fatalf("drain --move --wait: exit %d\n%s%s\nmoves: %+v", r.code, r.out, r.err, moves)
	}
	got, err := owner.GetInstance(ctx, inst.ID)
	if err != nil || got.HostID != h2 || got.State != sdk.StateRunning || got.SSH == nil || got.SSH.Command != "ssh -p 22001 root@h2.example" {
		t.Fatalf("after the drain: %+v %v", got, err)
	}
	if out := h.ok("", "hosts", "moves", h1); !strings.Contains(out, inst.ID) || !strings.Contains(out, h2) || !strings.Contains(out, "restart") {
		t.Fatalf("moves:\n%s", out)
	}
}
