package sdk_test

import (
	"context"
	"testing"
	"time"

	"gpucloud/sdk"
	"gpucloud/sdk/sdktest"
)

// The SDK decodes an instance's conditions and sends the condition filter; a bad filter comes
// back as a field error naming "condition".
func TestInstanceConditionsThroughSDK(t *testing.T) {
	e := sdktest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e.Host(t, "h1", 8)
	e.GPUServer(t, "g1", 1)
	a := e.Client(t, e.A.AdminKey)
	inst, err := a.CreateInstance(ctx, sdk.CreateInstanceRequest{Name: "vm1", InstanceTypeID: e.Dedicated, Image: "ubuntu-24.04"})
	if err != nil || len(inst.Conditions) != 2 || len(inst.Unhealthy()) != 0 {
		t.Fatalf("create: %+v %v", inst, err)
	}
	silent := sdk.InstanceFilter{Conditions: []string{sdk.ConditionHostReachable + "=" + sdk.ConditionFalse}}
	if list, err := sdk.Collect(a.Instances(ctx, silent)); err != nil || len(list) != 0 {
		t.Fatalf("silent hosts before the sweep: %+v %v", list, err)
	}
	// The sweeper's own query, with no grace: every daemon is now silent too long.
	if n, err := e.Store.MarkUnreachable(ctx, 0); err != nil || n != 2 {
		t.Fatalf("mark unreachable: %d %v", n, err)
	}
	got, err := a.GetInstance(ctx, inst.ID)
	if err != nil {
		t.Fatal(err)
	}
	bad := got.Unhealthy()
	if len(bad) != 2 || bad[0].Type != sdk.ConditionHostReachable || bad[1].Type != sdk.ConditionGPUServerReachable ||
		bad[0].Since == nil || bad[0].Message == "" {
		t.Fatalf("conditions after the sweep: %+v", got.Conditions)
	}
	if list, err := sdk.Collect(a.Instances(ctx, silent)); err != nil || len(list) != 1 || list[0].ID != inst.ID {
		t.Fatalf("silent hosts after the sweep: %+v %v", list, err)
	}
	_, err = a.ListInstances(ctx, sdk.InstanceListOptions{InstanceFilter: sdk.InstanceFilter{Conditions: []string{"HostReachable=maybe"}}})
	if ae, ok := sdk.AsAPIError(err); !ok || len(ae.Fields) != 1 || ae.Fields[0].Field != "condition" {
		t.Fatalf("bad condition filter: %v", err)
	}
}
