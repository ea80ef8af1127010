package cli_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"gpucloud/api"
	"gpucloud/cmd/gpuctl/cli"
	"gpucloud/sdk"
	"gpucloud/sdk/sdktest"
)

// TestDrainMoveShowsProgress drains a GPU server with --move: the plan is printed at once; with
// --wait gpuctl follows the moves (a goroutine plays the source gpuserverd, reporting the move
// under way and then done) and returns once the instance is on the other GPU server.
func TestDrainMoveShowsProgress(t *testing.T) {
	h := newHarness(t)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	_, hc := h.e.Host(t, "h1", 32)
	go sdktest.PlayHost(ctx, t, hc)
	gs1, gc1 := h.e.GPUServer(t, "g1", 1)
	gs2, _ := h.e.GPUServer(t, "g2", 1)
	op := h.e.OperatorClient
	if _, err := op.CordonGPUServer(ctx, gs2); err != nil {
		t.Fatal(err)
	}
	owner := h.e.Client(t, h.e.A.AdminKey)
	inst, err := owner.CreateInstance(ctx, sdk.CreateInstanceRequest{Name: "vm", InstanceTypeID: h.e.Shared, Image: "u"})
	if err != nil || inst.GPUServerID != gs1 {
		t.Fatalf("create: %+v %v", inst, err)
	}

	// Nowhere to go: the plan names the instance with the reason; --wait fails.
	var moves []sdk.GPUServerMove
	h.jsonOf(&moves, "", "gpu-servers", "drain", gs1, "--move", "-o", "json")
	if len(moves) != 1 || moves[0].State != "unplaced" || !strings.Contains(moves[0].Reason, "no capacity") {
		t.Fatalf("the plan with no room: %+v", moves)
	}
	if r := h.as("", "gpu-servers", "drain", gs1, "--move", "--wait", "--poll-interval", "20ms"); r.code != cli.ExitError ||
		!strings.Contains(r.err, "1 instance(s) stay") {
		t.Fatalf("drain --move --wait with no room: exit %d\n%s%s", r.code, r.out, r.err)
	}
	h.code(cli.ExitUsage, "", "gpu-servers", "drain", gs1, "--wait")

	if _, err := op.UncordonGPUServer(ctx, gs2); err != nil {
		t.Fatal(err)
	}
	// The source: it reports the move under way, then done.
	go func() {
		rep := api.GPUServerReport{Hostname: "g1", Endpoint: "g1:7000", Backend: "simulated",
			GPUs: []api.GPUInfo{{UUID: "GPU-g1-0", Name: "NVIDIA H100 80GB HBM3", MemoryBytes: 80 << 30, Healthy: true}}, ActiveSessions: []string{}}
		for step := 0; ctx.Err() == nil; time.Sleep(50 * time.Millisecond) {
			ack, err := gc1.GPUServerHeartbeat(ctx, rep)
			if err != nil || len(ack.Moves) == 0 {
				continue
			}
			state := api.MoveMoving
			if step++; step > 4 {
				state = api.MoveDone
			}
			rep.Moves = []api.MoveReport{{MoveID: ack.Moves[0].MoveID, State: state, SessionsMoved: 1, BytesCopied: uint64(step) << 20, BytesTotal: 8 << 20}}
		}
	}()
	r := h.as("", "gpu-servers", "drain", gs1, "--move", "--wait", "--poll-interval", "20ms", "--timeout", "30s")
	if r.code != 0 || !strings.Contains(r.err, "moving") || !strings.Contains(r.err, "bytes copied") ||
		!strings.Contains(r.err, "1 done") || !strings.Contains(r.err, "its work moved") || !strings.Contains(r.out, "done") {
		t.Fatalf("drain --move --wait: exit %d\n%s%s", r.code, r.out, r.err)
	}
	if got, err := owner.GetInstance(ctx, inst.ID); err != nil || got.GPUServerID != gs2 {
		t.Fatalf("after the drain: %+v %v", got, err)
	}
	if out := h.ok("", "gpu-servers", "moves", gs1); !strings.Contains(out, inst.ID) || !strings.Contains(out, gs2) {
		t.Fatalf("moves:\n%s", out)
	}
}
