package inventory

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
)

// eventSet is go-nvml's mock event set fed from a channel; an empty channel times out as NVML does.
func eventSet(events chan nvml.EventData, failWith nvml.Return) (*mock.EventSet, *bool) {
	freed := false
	return &mock.EventSet{
		WaitFunc: func(ms uint32) (nvml.EventData, nvml.Return) {
			if failWith != nvml.SUCCESS {
				return nvml.EventData{}, failWith
			}
			select {
			case e := <-events:
				return e, nvml.SUCCESS
			case <-time.After(5 * time.Millisecond):
				return nvml.EventData{}, nvml.ERROR_TIMEOUT
			}
		},
		FreeFunc: func() nvml.Return { freed = true; return nvml.SUCCESS },
	}, &freed
}

func watchable(s *dgxa100.Server, set nvml.EventSet) {
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return set, nvml.SUCCESS }
	for i := range s.Devices {
		ret := nvml.SUCCESS
		if i == 1 {
			ret = nvml.ERROR_NOT_SUPPORTED // skipped, not fatal
		}
		dev(s, i).RegisterEventsFunc = func(types uint64, _ nvml.EventSet) nvml.Return {
			if types != nvml.EventTypeXidCriticalError {
				return nvml.ERROR_INVALID_ARGUMENT
			}
			return ret
		}
	}
}

func TestWatchXIDsMarksOnlyHardwareFaults(t *testing.T) {
	s := newServer()
	events := make(chan nvml.EventData, 4)
	set, freed := eventSet(events, nvml.SUCCESS)
	watchable(s, set)
	inv := open(t, s)

	events <- nvml.EventData{Device: s.Devices[2], EventType: nvml.EventTypeXidCriticalError, EventData: 43} // a tenant's kernel fault
	events <- nvml.EventData{Device: s.Devices[5], EventType: nvml.EventTypeXidCriticalError, EventData: 79} // fallen off the bus
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got []XIDEvent
	err := inv.WatchXIDs(ctx, func(e XIDEvent) {
		got = append(got, e)
		if len(got) == 2 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("WatchXIDs returned %v, want context.Canceled", err)
	}
	if !*freed {
		t.Error("event set not freed")
	}
	want := []XIDEvent{{UUID: dev(s, 2).UUID, XID: 43}, {UUID: dev(s, 5).UUID, XID: 79, Hardware: true}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("events %+v, want %+v", got, want)
	}
	gpus := must(inv.GPUs())
	if !gpus[2].Health.Healthy {
		t.Errorf("a program's Xid 43 made GPU 2 unhealthy: %v", gpus[2].Health.Problems)
	}
	if gpus[5].Health.Healthy || !strings.Contains(strings.Join(gpus[5].Health.Problems, ";"), "Xid 79") {
		t.Errorf("GPU 5 after Xid 79: %+v", gpus[5].Health)
	}
	inv.ClearXIDs(dev(s, 5).UUID)
	if g := must(inv.GPUs())[5]; !g.Health.Healthy {
		t.Errorf("GPU 5 still unhealthy after ClearXIDs: %v", g.Health.Problems)
	}
}

func TestWatchXIDsErrors(t *testing.T) {
	t.Run("wait fails", func(t *testing.T) {
		s := newServer()
		set, _ := eventSet(nil, nvml.ERROR_GPU_IS_LOST)
		watchable(s, set)
		err := open(t, s).WatchXIDs(context.Background(), func(XIDEvent) {})
		if !errors.Is(err, nvml.ERROR_GPU_IS_LOST) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("register fails", func(t *testing.T) {
		s := newServer()
		set, _ := eventSet(nil, nvml.SUCCESS)
		watchable(s, set)
		dev(s, 6).RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.ERROR_UNKNOWN }
		err := open(t, s).WatchXIDs(context.Background(), func(XIDEvent) {})
		if !errors.Is(err, nvml.ERROR_UNKNOWN) || !strings.Contains(err.Error(), "GPU 6") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("no event set", func(t *testing.T) {
		s := newServer()
		s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
		if err := open(t, s).WatchXIDs(context.Background(), func(XIDEvent) {}); !errors.Is(err, nvml.ERROR_NOT_SUPPORTED) {
			t.Fatalf("got %v", err)
		}
	})
}
