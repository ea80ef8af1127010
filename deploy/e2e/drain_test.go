package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gpucloud/gpuserverd/backend/sim"
	"gpucloud/sdk"
	"gpucloud/sdk/sdktest"
)

// TestDrainMovesARunningProgram is issue 18's (d): a program running through the guest library,
// with exactly its VM's guest.conf, keeps running with correct results while an operator drains
// its GPU server through the API with {"move": true}; the real apiserver plans the move, the
// source gpuserverd learns it from its heartbeat's answer and migrates the session to the other
// gpuserverd; the instance, its reservation and its usage follow, billed once: the source's
// records end where the target's begin.
func TestDrainMovesARunningProgram(t *testing.T) {
	ctx := context.Background()
	bin := buildGolden(t)
	steady := filepath.Join(bin, "steady")
	if out, err := exec.Command("gcc", "-Wall", "-Werror", "-I../../gpuserverd/guest/include", "-I../../gpuserverd/guest/tests",
		"-o", steady, "../../gpuserverd/guest/tests/steady.c", "-L"+bin, "-lcuda").CombinedOutput(); err != nil {
		t.Fatalf("steady: %v\n%s", err, out)
	}
	env := newDrainEnv(t)
	op := env.OperatorClient
	regA, err := op.CreateGPUServer(ctx, "gs-a")
	if err != nil {
		t.Fatal(err)
	}
	regB, err := op.CreateGPUServer(ctx, "gs-b")
	if err != nil {
		t.Fatal(err)
	}
	a := startGPUServerd(t, bin, env.URL, regA.Credential, t.TempDir(), freeAddr(t), sim.Kind, "--checkpoint-period", "100ms")
	t.Setenv("GPUSERVERD_SIM_UUID_OFFSET", "8") // gs-b's simulated GPU is another GPU
	b := startGPUServerd(t, bin, env.URL, regB.Credential, t.TempDir(), freeAddr(t), sim.Kind, "--checkpoint-period", "100ms")
	srvA, err := op.GetGPUServer(ctx, regA.ID)
	if err != nil {
		t.Fatal(err)
	}
	m, err := op.CreateGPUModel(ctx, sdk.CreateGPUModelRequest{Name: srvA.GPUs[0].Name, MemoryBytes: srvA.GPUs[0].MemoryBytes,
		NVMLMatch: srvA.GPUs[0].Name})
	if err != nil {
		t.Fatal(err)
	}
	typ := sharedType(t, env, "drain-shared", m.ID)
	waitModel(t, env, m.ID, regA.ID, regB.ID)                   // the next heartbeats match both servers' GPUs
	if _, err := op.CordonGPUServer(ctx, regB.ID); err != nil { // the VM goes to gs-a
		t.Fatal(err)
	}
	h := startHost(t, env, filepath.Join(bin, "libcuda.so.1"), 8)
	tenant := env.Client(t, env.A.AdminKey)
	inst, err := tenant.CreateInstance(ctx, sdk.CreateInstanceRequest{Name: "mover", InstanceTypeID: typ, Image: "base"})
	if err != nil {
		t.Fatal(err)
	}
	h.converge(tenant, inst.ID, sdk.StateRunning)
	if _, err := op.UncordonGPUServer(ctx, regB.ID); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(t.TempDir(), "guest.conf")
	if err := os.WriteFile(conf, []byte(seedFile(t, h, inst.ID, "/gpucloud/guest.conf")), 0o600); err != nil {
		t.Fatal(err)
	}

	prog := exec.Command(steady, "80", "40")
	prog.Env = []string{"PATH=" + os.Getenv("PATH"), "LD_LIBRARY_PATH=" + bin, "GPUCLOUD_CONFIG=" + conf}
	var stderr bytes.Buffer
	out := startProgram(t, prog, &stderr)
	running := time.Now()
	time.Sleep(300 * time.Millisecond)

	var looks []string
	d, err := op.MoveDrainGPUServer(ctx, regA.ID, 100*time.Millisecond, func(d sdk.GPUServerDrain) {
		for _, m := range d.Moves {
			looks = append(looks, fmt.Sprintf("%s %d/%d bytes", m.State, m.BytesCopied, m.BytesTotal))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("drain looks: %v; last %+v", looks, d)
	if len(d.Moves) != 1 || d.Moves[0].State != "done" || d.Moves[0].SessionsMoved != 1 || d.Moves[0].TargetID != regB.ID ||
		d.Moves[0].BytesCopied < 3*(2<<20) || d.Remaining != 0 {
		t.Fatalf("the drain: %+v", d)
	}
	if got, err := tenant.GetInstance(ctx, inst.ID); err != nil || got.GPUServerID != regB.ID {
		t.Fatalf("the instance after the drain: %+v %v", got, err)
	}
	if ra, rb := reserved(t, env, regA.ID), reserved(t, env, regB.ID); ra != 0 || rb == 0 {
		t.Fatalf("reserved after the drain: gs-a %d, gs-b %d bytes", ra, rb)
	}
	// hostd's next pass rewrites the VM's guest.conf: a new process dials gs-b, with a token for it.
	h.converge(tenant, inst.ID, sdk.StateRunning)
	moved := seedFile(t, h, inst.ID, "/gpucloud/guest.conf")
	if !strings.Contains(moved, "GPUCLOUD_ENDPOINT="+b.endpoint+"\n") {
		t.Fatalf("the VM's guest.conf after the drain:\n%s", moved)
	}
	movedConf := filepath.Join(t.TempDir(), "guest.conf")
	if err := os.WriteFile(movedConf, []byte(moved), 0o600); err != nil {
		t.Fatal(err)
	}

	rest, _ := io.ReadAll(out)
	err = prog.Wait()
	finished := time.Now()
	if err != nil || !strings.Contains(string(rest), "STEADY OK 80") {
		t.Fatalf("steady across a drain: %v %q\n%s", err, rest, stderr.String())
	}
	if !strings.Contains(stderr.String(), "gpucloud: session moving to "+b.endpoint) {
		t.Fatalf("the guest never followed the redirect:\n%s", stderr.String())
	}
	for _, g := range []*gpuserverd{a, b} {
		for deadline := time.Now().Add(20 * time.Second); g.activeSessions(t) != 0; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("gpuserverd %s still serves a session after the program ended", g.endpoint)
			}
		}
	}

	// Billed once: the records of both servers, in order, meet without gap or overlap and cover
	// the program's run.
	type rec struct {
		source     string
		start, end time.Time
	}
	var recs []rec
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		rows, err := env.Store.Pool.Query(ctx, `SELECT source, start_at, end_at FROM billing_usage_records
			WHERE kind = 'gpu' AND instance_id = $1 ORDER BY start_at`, inst.ID)
		if err != nil {
			t.Fatal(err)
		}
		recs = recs[:0]
		for rows.Next() {
			var r rec
			if err := rows.Scan(&r.source, &r.start, &r.end); err != nil {
				t.Fatal(err)
			}
			recs = append(recs, r)
		}
		rows.Close()
		if n := len(recs); n > 0 && recs[n-1].source == regB.ID && recs[n-1].end.After(finished.Add(-time.Second)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("billing after 20 s: %+v", recs)
		}
	}
	sources := map[string]int{}
	for i, r := range recs {
		sources[r.source]++
		if i > 0 && !r.start.Equal(recs[i-1].end) {
			t.Fatalf("record %d (%s) starts %v, the one before (%s) ended %v: a gap or an overlap", i, r.source, r.start, recs[i-1].source, recs[i-1].end)
		}
	}
	if sources[regA.ID] == 0 || sources[regB.ID] == 0 || len(sources) != 2 {
		t.Fatalf("records by source: %v", sources)
	}
	if recs[0].start.After(running) || recs[len(recs)-1].end.After(finished.Add(time.Second)) {
		t.Fatalf("billed from %v to %v; it ran from before %v to about %v", recs[0].start, recs[len(recs)-1].end, running, finished)
	}

	// A new process in the moved VM runs on gs-b.
	second := exec.Command(steady, "3", "0")
	second.Env = []string{"PATH=" + os.Getenv("PATH"), "LD_LIBRARY_PATH=" + bin, "GPUCLOUD_CONFIG=" + movedConf}
	if out, err := second.CombinedOutput(); err != nil || !strings.Contains(string(out), "STEADY OK 3") {
		t.Fatalf("a new process after the drain: %v\n%s", err, out)
	}
}

// startProgram starts a guest program that prints a line once it runs, and returns its stdout.
func startProgram(t *testing.T, prog *exec.Cmd, errs io.Writer) io.Reader {
	t.Helper()
	out, err := prog.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	prog.Stderr = errs
	if err := prog.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prog.Process.Kill(); prog.Wait() })
	buf := make([]byte, 64)
	if n, _ := out.Read(buf); !strings.HasPrefix(string(buf[:n]), "STEADY RUNNING") {
		t.Fatalf("steady: %q %v", buf[:n], errs)
	}
	return out
}

func newDrainEnv(t *testing.T) *sdktest.Env { return sdktest.New(t) }

// waitModel waits until the GPU servers' GPUs are matched to catalog model (a heartbeat does it).
func waitModel(t *testing.T, env *sdktest.Env, model string, servers ...string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		matched := 0
		for _, id := range servers {
			g, err := env.OperatorClient.GetGPUServer(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			if len(g.GPUs) > 0 && g.GPUs[0].GPUModelID == model {
				matched++
			}
		}
		if matched == len(servers) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GPU servers %v not matched to model %s after 20 s", servers, model)
		}
	}
}
