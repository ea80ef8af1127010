package worker

import (
	"bytes"
	"strings"
	"testing"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/wire"
)

// A plan runs with a variant pack sent whole (DnnExecutePack): the worker makes the pack, sets
// and checks each attribute as a SetAttribute, finalizes it and executes (the simulated backend
// then answers that it runs no plans: the pack got that far), and bad packs are refused naming
// what is wrong, as are another session's handle, plan or descriptors.
func TestDnnExecutePack(t *testing.T) {
	c := newSession(t, Config{Tier: "shared", Devices: []int{0}})
	other := newSession(t, Config{Tier: "shared", Devices: []int{0}})
	h := c.dnnID(&wire.DnnCreate{})
	plan := c.dnnID(&wire.DnnDescCreate{Kind: 5})
	var theirs uint64
	for range 100 { // an id this session does not reach (each execution here makes one pack)
		theirs = other.dnnID(&wire.DnnDescCreate{Kind: 5})
	}
	good := []wire.DnnSetAttribute{
		{Name: 1000, Kind: backend.DnnTypeInt64, Count: 2, Elems: u64s(1, 2)},
		// a device address, and a by-value float (0.125) as the guest sends it
		{Name: 1001, Kind: backend.DnnTypeHostValues, Count: 2, Elems: u64s(0, 0x7f0000001000, 4, 0x3e000000)},
		{Name: 1003, Kind: backend.DnnTypeVoidPtr, Count: 1, Elems: u64s(0x7f0000002000)},
	}
	r := c.dnn(&wire.DnnExecutePack{Handle: h, Plan: plan, Attrs: encodePackAttrs(good)})
	if backend.DnnStatus(r.Status) != backend.DnnNotSupported || !strings.Contains(r.Message, "runs no execution plans") {
		t.Fatalf("a good pack did not reach the backend's execution: %+v", r)
	}
	truncated := encodePackAttrs(good)
	bad := []struct {
		name string
		m    *wire.DnnExecutePack
		want backend.DnnStatus
		says string
	}{
		{"truncated", &wire.DnnExecutePack{Handle: h, Plan: plan, Attrs: truncated[:len(truncated)-3]}, backend.DnnBadParam, "variant pack"},
		{"short head", &wire.DnnExecutePack{Handle: h, Plan: plan, Attrs: []byte{1, 2, 3}}, backend.DnnBadParam, "head"},
		{"unknown type", &wire.DnnExecutePack{Handle: h, Plan: plan, Attrs: encodePackAttrs([]wire.DnnSetAttribute{
			{Name: 1001, Kind: 99, Count: 1, Elems: u64s(1)}})}, backend.DnnBadParamType, "attribute 1001"},
		{"count and bytes disagree", &wire.DnnExecutePack{Handle: h, Plan: plan, Attrs: encodePackAttrs([]wire.DnnSetAttribute{
			{Name: 1000, Kind: backend.DnnTypeInt64, Count: 3, Elems: u64s(1)}})}, backend.DnnBadParam, "elems"},
		{"too many attributes", &wire.DnnExecutePack{Handle: h, Plan: plan, Attrs: bytes.Repeat(encodePackAttrs(good[:1]), dnnPackMaxAttrs+1)},
			backend.DnnBadParam, "more than"},
		{"another session's plan", &wire.DnnExecutePack{Handle: h, Plan: theirs, Attrs: encodePackAttrs(good)}, backend.DnnBadParam, "descriptor"},
		{"a made-up handle", &wire.DnnExecutePack{Handle: h + 100, Plan: plan, Attrs: encodePackAttrs(good)}, backend.DnnBadParam, "handle"},
		{"another session's descriptor inside", &wire.DnnExecutePack{Handle: h, Plan: plan, Attrs: encodePackAttrs([]wire.DnnSetAttribute{
			{Name: 1001, Kind: backend.DnnTypeDescriptor, Count: 1, Elems: u64s(theirs)}})}, backend.DnnBadParam, "element 0"},
	}
	for _, tc := range bad {
		if r := c.dnn(tc.m); backend.DnnStatus(r.Status) != tc.want || !strings.Contains(r.Message, tc.says) {
			t.Errorf("%s: %+v, want status %d saying %q", tc.name, r, tc.want, tc.says)
		}
	}
}

// FuzzDnnPackAttrs: whatever decodePackAttrs accepts encodes back to the same bytes.
func FuzzDnnPackAttrs(f *testing.F) {
	f.Add(encodePackAttrs([]wire.DnnSetAttribute{{Name: 1000, Kind: 3, Count: 1, Elems: u64s(7)}}))
	f.Add([]byte{})
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		attrs, err := decodePackAttrs(b)
		if err != nil {
			return
		}
		if len(attrs) > dnnPackMaxAttrs {
			t.Fatalf("%d attributes accepted", len(attrs))
		}
		if got := encodePackAttrs(attrs); !bytes.Equal(got, b) {
			t.Fatalf("re-encoded %x, decoded from %x", got, b)
		}
	})
}
