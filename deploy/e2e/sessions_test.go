package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	"gpucloud/api"
	"gpucloud/sdk"
	"gpucloud/sdk/sdktest"
)

// TestAckEndsSessionsOfGoneInstances checks what the apiserver tells a GPU server to end: the
// reported sessions of deleted instances, of instances on another GPU server, and ids that name
// no instance; never a live instance's.
func TestAckEndsSessionsOfGoneInstances(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	env := sdktest.New(t)
	_, hc := env.Host(t, "h1", 64)
	go sdktest.PlayHost(ctx, t, hc)
	_, gc := env.GPUServer(t, "gs1", 1)
	tenant := env.Client(t, env.A.AdminKey)
	mk := func(name string) sdk.Instance {
		inst, err := tenant.CreateInstance(ctx, sdk.CreateInstanceRequest{Name: name, InstanceTypeID: env.Shared, Image: "u"})
		if err != nil {
			t.Fatal(err)
		}
		if inst, err = tenant.WaitInstance(ctx, inst.ID, 20*time.Millisecond, nil, sdk.StateRunning); err != nil {
			t.Fatal(err)
		}
		return inst
	}
	live, gone := mk("live"), mk("gone")
	if _, err := tenant.DeleteInstance(ctx, gone.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := tenant.WaitInstance(ctx, gone.ID, 20*time.Millisecond, nil, sdk.StateDeleted); err != nil {
		t.Fatal(err)
	}
	// Another GPU server's instance is not this one's to keep.
	_, gc2 := env.GPUServer(t, "gs2", 1)
	rep := api.GPUServerReport{Hostname: "gs1", Endpoint: "gs1:7000", Backend: "simulated",
		GPUs:           []api.GPUInfo{{UUID: "GPU-gs1-0", Name: "NVIDIA H100 80GB HBM3", MemoryBytes: 80 << 30, Healthy: true}},
		ActiveSessions: []string{live.ID, gone.ID, "not-an-instance"}}
	ack, err := gc.GPUServerHeartbeat(ctx, rep)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ack.EndSessions)
	want := []string{gone.ID, "not-an-instance"}
	slices.Sort(want)
	if !slices.Equal(ack.EndSessions, want) {
		t.Fatalf("ack ends %v, want %v (live %s must stay)", ack.EndSessions, want, live.ID)
	}
	rep.Hostname, rep.Endpoint, rep.GPUs[0].UUID, rep.ActiveSessions = "gs2", "gs2:7000", "GPU-gs2-0", []string{live.ID}
	if ack, err = gc2.GPUServerHeartbeat(ctx, rep); err != nil || !slices.Equal(ack.EndSessions, []string{live.ID}) {
		t.Fatalf("another GPU server's ack ends %v (%v), want the instance it does not hold", ack.EndSessions, err)
	}
}
