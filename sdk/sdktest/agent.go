package sdktest

import (
	"context"
	"testing"
	"time"

	"gpucloud/api"
	"gpucloud/sdk"
)

// PlayHost plays hostd for one host until ctx ends: every 20 ms it reads the wanted instances
// and reports each as having reached its desired state (running, stopped or deleted). It is
// a test double of the host agent, talking the real agent API.
func PlayHost(ctx context.Context, t testing.TB, hc *sdk.Client) {
	for ctx.Err() == nil {
		want, err := hc.HostInstances(ctx)
		if err == nil {
			for _, d := range want.Instances {
				state := api.ObservedRunning
				switch d.DesiredState {
				case api.DesiredStopped:
					state = api.ObservedStopped
				case api.DesiredDeleted:
					state = api.ObservedDeleted
				}
				obs := api.InstanceObserved{State: state, RebootGeneration: d.RebootGeneration}
				if err := hc.ReportInstance(ctx, d.ID, obs); err != nil && ctx.Err() == nil {
					t.Errorf("host agent: report %s %s: %v", d.ID, state, err)
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}
