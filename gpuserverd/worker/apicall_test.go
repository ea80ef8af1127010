package worker

import (
	"encoding/binary"
	"testing"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/wire"
)

func u64s(vs ...uint64) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	return b
}

// Generic calls: devices are the session's ordinals, mapped to the backend's; malformed or unknown
// calls get a clear result and leave the session working.
func TestAPICall(t *testing.T) {
	c := newSession(t, Config{Tier: "dedicated", Devices: []int{1, 0}})
	var r wire.ApiCallReply
	// Session devices 0 and 1 are backend devices 1 and 0: peers of each other.
	c.call(&wire.ApiCall{Fn: backend.APIDeviceCanAccessPeer, Args: u64s(1, 0, 1, 7)}, &r)
	if r.Result != 0 || len(r.Out) != 24 || binary.LittleEndian.Uint64(r.Out) != 1 {
		t.Fatalf("cuDeviceCanAccessPeer(0, 1): %+v", r)
	}
	c.call(&wire.ApiCall{Fn: backend.APIDeviceCanAccessPeer, Args: u64s(1, 1, 1, 7)}, &r)
	if r.Result != 0 || binary.LittleEndian.Uint64(r.Out) != 0 {
		t.Fatalf("cuDeviceCanAccessPeer(1, 1): %+v", r)
	}
	for _, bad := range []struct {
		name string
		m    *wire.ApiCall
		want backend.Result
	}{
		{"ungranted device", &wire.ApiCall{Fn: backend.APIDeviceCanAccessPeer, Args: u64s(1, 0, 2, 0)}, backend.ErrInvalidDevice},
		{"negative device", &wire.ApiCall{Fn: backend.APIDeviceCanAccessPeer, Args: u64s(1, ^uint64(0), 0, 0)}, backend.ErrInvalidDevice},
		{"short arguments", &wire.ApiCall{Fn: backend.APIDeviceCanAccessPeer, Args: u64s(1, 0)}, backend.ErrInvalidValue},
		{"unknown function", &wire.ApiCall{Fn: 2999, Args: nil}, backend.ErrNotSupported},
		{"stale stream", &wire.ApiCall{Fn: backend.APIStreamGetFlags, Args: u64s(12345, 1, 0)}, backend.ErrInvalidHandle},
	} {
		c.call(bad.m, &r)
		if backend.Result(r.Result) != bad.want || len(r.Out) != 0 {
			t.Errorf("%s: %+v, want result %d and no outputs", bad.name, r, bad.want)
		}
	}
	var st wire.Status
	c.call(&wire.Synchronize{}, &st)
	if st.Result != 0 {
		t.Fatalf("session after refused calls: %+v", st)
	}
}
