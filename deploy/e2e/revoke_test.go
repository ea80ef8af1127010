package e2e

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gpucloud/gpuserverd/backend/sim"
	"gpucloud/gpuserverd/wire"
	"gpucloud/sdk"
	"gpucloud/sdk/sdktest"
)

// TestRevocationReachesGPUServer is issue 13's finding 2: once an instance is deleted (or
// stopped), gpuserverd refuses its session token and ends its running session within a second,
// told by the apiserver's revocations long-poll (PostgreSQL NOTIFY through the apiserver's
// listener), not by a heartbeat (held here to the apiserver's 10 s period). A restarted gpuserverd
// refuses the token from its first Hello.
func TestRevocationReachesGPUServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env := sdktest.New(t)
	go env.Store.ListenCredentials(ctx, nil) // as app.Serve runs it: NOTIFY reaches the long-polls
	bin := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", filepath.Join(bin, "gpuserverd"), "../../cmd/gpuserverd").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	gsReg, err := env.OperatorClient.CreateGPUServer(ctx, "gs-revoke")
	if err != nil {
		t.Fatal(err)
	}
	// The catalog knows the simulated GPU before gpuserverd reports it.
	const simName = "Simulated GPU (test double)"
	model, err := env.OperatorClient.CreateGPUModel(ctx, sdk.CreateGPUModelRequest{Name: simName, MemoryBytes: sim.DefaultMemory, NVMLMatch: simName})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("GPUSERVERD_SIM_DEVICES", "2") // one GPU for each instance's slice
	data, ep := t.TempDir(), freeAddr(t)
	noHeartbeatHelp := []string{"--max-heartbeat-period", "1h"} // the apiserver's 10 s period then
	gs := startGPUServerd(t, bin, env.URL, gsReg.Credential, data, ep, sim.Kind, noHeartbeatHelp...)
	if srv, err := env.OperatorClient.GetGPUServer(ctx, gsReg.ID); err != nil || len(srv.GPUs) == 0 || srv.GPUs[0].GPUModelID != model.ID {
		t.Fatalf("GPU server after join: %+v %v (model %s)", srv, err, model.ID)
	}
	typ := sharedType(t, env, "revoke-shared", model.ID)
	_, hc := env.Host(t, "h-revoke", 64)
	go sdktest.PlayHost(ctx, t, hc)
	tenant := env.Client(t, env.A.AdminKey)
	mk := func(name string) (sdk.Instance, string) {
		inst, err := tenant.CreateInstance(ctx, sdk.CreateInstanceRequest{Name: name, InstanceTypeID: typ, Image: "ubuntu-24.04"}) // registered by sdktest; the host is played
		if err != nil {
			t.Fatal(err)
		}
		if inst, err = tenant.WaitInstance(ctx, inst.ID, 20*time.Millisecond, nil, sdk.StateRunning); err != nil {
			t.Fatal(err)
		}
		want, err := hc.HostInstances(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range want.Instances {
			if d.ID == inst.ID && d.GPU != nil {
				return inst, d.Token.Token
			}
		}
		t.Fatalf("no session token for %s in %+v", inst.ID, want)
		return inst, ""
	}
	gone, goneTok := mk("gone")
	_, liveTok := mk("live")

	held := helloAt(t, ep, goneTok)
	if r := held.hello; r.Result != 0 {
		t.Fatalf("Hello before the delete: %d %q", r.Result, r.Message)
	}
	ended := make(chan time.Time, 1)
	go func() {
		held.conn.SetReadDeadline(time.Now().Add(time.Minute))
		var b [1]byte
		held.conn.Read(b[:]) // returns when the worker is killed
		ended <- time.Now()
	}()
	if _, err := tenant.DeleteInstance(ctx, gone.ID); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	var refusedAt time.Time
	for refusedAt.IsZero() {
		r, err := tryHello(t, ep, goneTok)
		if err != nil { // admitted as the revocation arrived, and ended: ask again
			if time.Since(deleted) > 5*time.Second {
				t.Fatalf("no refusal 5 s after the delete: %v", err)
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		r.conn.Close()
		switch {
		case r.hello.Result == 800 && strings.Contains(r.hello.Message, "stopped or deleted"):
			refusedAt = time.Now()
		case time.Since(deleted) > 5*time.Second:
			t.Fatalf("the deleted instance's token still opens sessions 5 s after the delete: %+v", r.hello)
		default:
			time.Sleep(20 * time.Millisecond)
		}
	}
	var endedAt time.Time
	select {
	case endedAt = <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the deleted instance's session still runs 5 s after the delete")
	}
	t.Logf("after the delete: token refused in %v, session ended in %v", refusedAt.Sub(deleted), endedAt.Sub(deleted))
	if refusedAt.Sub(deleted) > time.Second || endedAt.Sub(deleted) > time.Second {
		t.Fatalf("revocation took %v (refusal) and %v (end of session); the bound is 1 s", refusedAt.Sub(deleted), endedAt.Sub(deleted))
	}
	if r := helloAt(t, ep, liveTok); r.hello.Result != 0 {
		t.Fatalf("a live instance's token after another's delete: %+v", r.hello)
	}

	// Level-triggered: a restarted gpuserverd knows the revocation before its first session.
	gs.stop(t)
	startGPUServerd(t, bin, env.URL, gsReg.Credential, data, ep, sim.Kind, noHeartbeatHelp...)
	if r := helloAt(t, ep, goneTok); r.hello.Result != 800 {
		t.Fatalf("a restarted gpuserverd admitted the deleted instance's token: %+v", r.hello)
	}
	if r := helloAt(t, ep, liveTok); r.hello.Result != 0 {
		t.Fatalf("a restarted gpuserverd refused a live instance's token: %+v", r.hello)
	}
}

type session struct {
	conn  net.Conn
	hello wire.HelloReply
}

// helloAt opens a session on gpuserverd at ep with tok and reads its answer.
func helloAt(t *testing.T, ep, tok string) session {
	t.Helper()
	s, err := tryHello(t, ep, tok)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// tryHello sends a Hello and reads its reply. A session admitted just as its instance's
// revocation arrives is ended before it answers: the caller sees the connection close.
func tryHello(t *testing.T, ep, tok string) (session, error) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", ep, 5*time.Second)
	if err != nil {
		return session{}, err
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := conn.Write(wire.AppendFrame(nil, &wire.Hello{Version: wire.Version, Token: tok}, 0, 1)); err != nil {
		return session{}, err
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	h, p, err := wire.ReadFrame(conn, nil)
	var r wire.HelloReply
	if err != nil || h.Type != wire.TypeHelloReply || r.Decode(p) != nil {
		return session{}, fmt.Errorf("HelloReply: %v %v", h, err)
	}
	conn.SetReadDeadline(time.Time{})
	return session{conn, r}, nil
}
