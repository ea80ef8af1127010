package sdk_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"gpucloud/sdk"
	"gpucloud/sdk/sdktest"
)

func TestDrainGPUServerWaitsForItsInstances(t *testing.T) {
	ctx := ctxT(t)
	e := sdktest.New(t)
	_, hc := e.Host(t, "h1", 32)
	gs, _ := e.GPUServer(t, "g1", 1)
	actx, stop := context.WithCancel(ctx)
	defer stop()
	go sdktest.PlayHost(actx, t, hc)
	owner := e.Client(t, e.B.AdminKey)
	gpu, err := owner.CreateInstance(ctx, sdk.CreateInstanceRequest{Name: "gpu", InstanceTypeID: e.Dedicated, Image: "u"})
	if err != nil || gpu.GPUServerID != gs {
		t.Fatalf("create %+v %v", gpu, err)
	}
	cpu, err := owner.CreateInstance(ctx, sdk.CreateInstanceRequest{Name: "cpu", InstanceTypeID: e.CPU, Image: "u"})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		seen []int
	)
	snapshot := func() []int {
		mu.Lock()
		defer mu.Unlock()
		return append([]int(nil), seen...)
	}
	go func() {
		// Delete the GPU instance once the drain has looked at least once.
		for len(snapshot()) == 0 && actx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		if _, err := owner.DeleteInstance(ctx, gpu.ID); err != nil {
			t.Errorf("delete: %v", err)
		}
	}()
	err = e.OperatorClient.DrainGPUServer(ctx, gs, 10*time.Millisecond, func(p sdk.DrainProgress) {
		mu.Lock()
		seen = append(seen, len(p.Remaining))
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	got := snapshot()
	if got[0] != 1 || got[len(got)-1] != 0 {
		t.Fatalf("progress %v: want 1 ... 0", got)
	}
	// The CPU-only instance was never on the GPU server and is untouched.
	if i, err := owner.GetInstance(ctx, cpu.ID); err != nil || i.State == sdk.StateDeleted || i.State == sdk.StateDeleting {
		t.Fatalf("cpu instance %+v %v", i, err)
	}
	g, err := e.OperatorClient.GetGPUServer(ctx, gs)
	if err != nil || !g.Draining || !g.Cordoned {
		t.Fatalf("gpu server %+v %v", g, err)
	}
	// Tenants may not drain.
	if err := owner.DrainGPUServer(ctx, gs, time.Millisecond, nil); !sdk.IsForbidden(err) {
		t.Fatalf("tenant drains: %v", err)
	}
}
