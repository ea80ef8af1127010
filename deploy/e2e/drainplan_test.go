package e2e

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"gpucloud/api"
	"gpucloud/apiserver/app"
	"gpucloud/apiserver/server"
	"gpucloud/internal/sessiontoken"
	"gpucloud/sdk"
	"gpucloud/sdk/sdktest"
)

// TestDrainPlansMovesOnlyTheSourceReports drives a drain that moves work through the API with
// GPU servers played by heartbeats: the plan reserves the target's GPUs at once, the source (and
// only the source) learns its moves, also from an apiserver restarted on the same database, with
// tokens for the target and reports them; done moves the
// instance and its reservation, failed gives the target's back; retried reports change nothing;
// a drain again plans what is left, naming why an instance finds no room.
func TestDrainPlansMovesOnlyTheSourceReports(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	env := sdktest.New(t)
	op := env.OperatorClient
	_, hc := env.Host(t, "h1", 64)
	go sdktest.PlayHost(ctx, t, hc)
	reg1, err := op.CreateGPUServer(ctx, "gs1") // its credential reaches a restarted apiserver below
	if err != nil {
		t.Fatal(err)
	}
	gs1, gc1 := reg1.ID, env.Client(t, reg1.Credential)
	if _, err := gc1.GPUServerHeartbeat(ctx, api.GPUServerReport{Hostname: "gs1", Endpoint: "gs1:7000", Backend: "simulated",
		GPUs: []api.GPUInfo{{UUID: "GPU-gs1-0", Name: "NVIDIA H100 80GB HBM3", MemoryBytes: 80 << 30, Healthy: true}}}); err != nil {
		t.Fatal(err)
	}
	gs2, gc2 := env.GPUServer(t, "gs2", 1)
	gs3, gc3 := env.GPUServer(t, "gs3", 1)
	for _, id := range []string{gs2, gs3} { // the instances go to gs1
		if _, err := op.CordonGPUServer(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	tenant := env.Client(t, env.A.AdminKey)
	var ids []string
	for _, name := range []string{"x", "y"} {
		inst, err := tenant.CreateInstance(ctx, sdk.CreateInstanceRequest{Name: name, InstanceTypeID: env.Shared, Image: "u"})
		if err != nil {
			t.Fatal(err)
		}
		if inst, err = tenant.WaitInstance(ctx, inst.ID, 20*time.Millisecond, nil, sdk.StateRunning); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, inst.ID)
	}
	x, y := ids[0], ids[1]
	if _, err := op.UncordonGPUServer(ctx, gs2); err != nil {
		t.Fatal(err)
	}
	slice := reserved(t, env, gs1) / 2

	// Bad input is refused, naming the field, before anything changes.
	beat := func(gc *sdk.Client, name string, sessions []string, moves ...api.MoveReport) (api.GPUServerAck, error) {
		return gc.GPUServerHeartbeat(ctx, api.GPUServerReport{Hostname: name, Endpoint: name + ":7000", Backend: "simulated",
			GPUs:           []api.GPUInfo{{UUID: "GPU-" + name + "-0", Name: "NVIDIA H100 80GB HBM3", MemoryBytes: 80 << 30, Healthy: true}},
			ActiveSessions: append([]string{}, sessions...), Moves: moves})
	}
	if _, err := beat(gc1, "gs1", nil, api.MoveReport{MoveID: "not-a-move", State: "teleported"}); err == nil ||
		!strings.Contains(err.Error(), "moves[0].move_id") || !strings.Contains(err.Error(), "moves[0].state") {
		t.Fatalf("a heartbeat with a bad move report: %v", err)
	}

	d, err := op.StartMoveDrainGPUServer(ctx, gs1)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Draining || d.Counts["pending"] != 2 || len(d.Moves) != 2 || d.Moves[0].TargetID != gs2 {
		t.Fatalf("the drain's plan: %+v", d)
	}
	if got := reserved(t, env, gs2); got != 2*slice {
		t.Fatalf("gs2 holds %d bytes after the plan, want both slices (%d) reserved at once", got, 2*slice)
	}
	moveOf := map[string]string{}
	for _, m := range d.Moves {
		moveOf[m.InstanceID] = m.ID
	}

	// A session the target runs for an open move is not ended; another GPU server's word on a
	// move that is not its own changes nothing and it is handed no moves.
	if ack, err := beat(gc2, "gs2", []string{x}); err != nil || len(ack.EndSessions) != 0 || len(ack.Moves) != 0 {
		t.Fatalf("the target's ack while the move is open: %+v %v", ack, err)
	}
	if ack, err := beat(gc3, "gs3", nil, api.MoveReport{MoveID: moveOf[x], State: api.MoveDone, SessionsMoved: 1}); err != nil || len(ack.Moves) != 0 {
		t.Fatalf("a stranger's report: %+v %v", ack, err)
	}
	if d, _ = op.GetGPUServerDrain(ctx, gs1); d.Counts["pending"] != 2 {
		t.Fatalf("another GPU server's report moved something: %+v", d)
	}

	// The plan is in the database: an apiserver started afresh on it (a restart) hands the
	// source the same moves. The source learns its moves with tokens for the target.
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	srvCtx, stopSrv := context.WithCancel(ctx)
	defer stopSrv()
	restarted, err := app.NewServer(srvCtx, server.Options{Store: env.Store, TokenKey: key})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(restarted.Handler())
	defer hs.Close()
	if gc1, err = sdk.New(hs.URL, reg1.Credential, sdk.Options{}); err != nil {
		t.Fatal(err)
	}
	ack, err := beat(gc1, "gs1", []string{x})
	if err != nil || len(ack.Moves) != 2 {
		t.Fatalf("the source's ack: %+v %v", ack, err)
	}
	gs2Srv, err := op.GetGPUServer(ctx, gs2)
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := base64.StdEncoding.DecodeString(ack.TokenPublicKey)
	for _, m := range ack.Moves {
		c, err := sessiontoken.Verify(ed25519.PublicKey(pub), m.Token.Token, gs2, time.Now())
		if err != nil || c.SessionID != m.InstanceID || !slices.Equal(c.GPUs, []string{gs2Srv.GPUs[0].UUID}) ||
			m.Target != "gs2:7000" || m.TargetID != gs2 {
			t.Fatalf("move %+v: token %+v %v", m, c, err)
		}
		if _, err := sessiontoken.Verify(ed25519.PublicKey(pub), m.Token.Token, gs1, time.Now()); err == nil {
			t.Fatal("the move's token is good on the source too")
		}
	}

	// x moves, y fails: x and its reservation are on gs2, y's target slice is given back.
	reports := []api.MoveReport{{MoveID: moveOf[x], State: api.MoveDone, SessionsMoved: 1, BytesCopied: 6 << 20, BytesTotal: 6 << 20, PauseMs: 3},
		{MoveID: moveOf[y], State: api.MoveFailed, Reason: "the session holds cuDNN handles"}}
	for range 2 { // the second time is a retry: nothing changes
		if ack, err = beat(gc1, "gs1", nil, reports...); err != nil || len(ack.Moves) != 0 {
			t.Fatalf("the source's reports: %+v %v", ack, err)
		}
		if got := reserved(t, env, gs2); got != slice {
			t.Fatalf("gs2 holds %d bytes, want x's slice %d", got, slice)
		}
		if got := reserved(t, env, gs1); got != slice {
			t.Fatalf("gs1 holds %d bytes, want y's slice %d", got, slice)
		}
	}
	if inst, err := tenant.GetInstance(ctx, x); err != nil || inst.GPUServerID != gs2 {
		t.Fatalf("x after its move: %+v %v", inst, err)
	}
	if inst, err := tenant.GetInstance(ctx, y); err != nil || inst.GPUServerID != gs1 {
		t.Fatalf("y after its failed move: %+v %v", inst, err)
	}
	d, _ = op.GetGPUServerDrain(ctx, gs1)
	if d.Counts["done"] != 1 || d.Counts["failed"] != 1 || d.Remaining != 1 || d.Open() != 0 {
		t.Fatalf("the drain after the reports: %+v", d)
	}
	for _, m := range d.Moves {
		if m.InstanceID == y && m.Reason != "the session holds cuDNN handles" {
			t.Fatalf("y's move: %+v", m)
		}
	}
	// The source's session of x is now stale there; the target keeps it.
	if ack, _ := beat(gc1, "gs1", []string{x}); !slices.Equal(ack.EndSessions, []string{x}) {
		t.Fatalf("the source's ack after the move ends %v, want x", ack.EndSessions)
	}
	if ack, _ := beat(gc2, "gs2", []string{x}); len(ack.EndSessions) != 0 {
		t.Fatalf("the target's ack after the move ends %v", ack.EndSessions)
	}

	// Draining again plans y again; with no GPU server left with room, y is named with the reason.
	if _, err := op.CordonGPUServer(ctx, gs2); err != nil {
		t.Fatal(err)
	}
	d, err = op.StartMoveDrainGPUServer(ctx, gs1)
	if err != nil {
		t.Fatal(err)
	}
	if d.Counts["unplaced"] != 1 || d.Moves[0].InstanceID != y || !strings.Contains(d.Moves[0].Reason, "no capacity") {
		t.Fatalf("the drain again, nowhere to go: %+v", d)
	}
	if _, err := op.GetGPUServerDrain(ctx, gs3); err != nil {
		t.Fatalf("a GPU server never drained: %v", err)
	}
	var nf *sdk.APIError
	if _, err := op.GetGPUServerDrain(ctx, "00000000-0000-4000-8000-000000000000"); !errors.As(err, &nf) || nf.Status != 404 {
		t.Fatalf("the drain of no GPU server: %v", err)
	}
	if _, err := tenant.GetGPUServerDrain(ctx, gs1); err == nil {
		t.Fatal("a tenant read a GPU server's drain")
	}
}
