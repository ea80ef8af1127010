package worker

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/backend/sim"
	"gpucloud/gpuserverd/wire"
)

func (c *client) dnn(m wire.Message) wire.DnnReply {
	c.t.Helper()
	var r wire.DnnReply
	c.call(m, &r)
	return r
}

func (c *client) dnnID(m wire.Message) uint64 {
	c.t.Helper()
	r := c.dnn(m)
	if r.Status != 0 || r.Result != 0 {
		c.t.Fatalf("%s: %+v", m.Type(), r)
	}
	return r.Value
}

// Descriptors and handles are the session's own: another session's ids are refused wherever
// they appear (as the object of a call or as an attribute's element), and the owner's still work.
func TestDnnIDsAreSessionLocal(t *testing.T) {
	owner := newSession(t, Config{Tier: "shared", TenantID: "a", Devices: []int{0}})
	other := newSession(t, Config{Tier: "shared", TenantID: "b", Devices: []int{0}})
	oh := owner.dnnID(&wire.DnnCreate{})
	owner.dnnID(&wire.DnnDescCreate{Kind: 17})
	od := owner.dnnID(&wire.DnnDescCreate{Kind: 17}) // an id the other session has not reached
	other.dnnID(&wire.DnnCreate{})
	mine := other.dnnID(&wire.DnnDescCreate{Kind: 15})
	if mine == od {
		t.Fatalf("the test needs an id only the owner has")
	}
	for _, m := range []wire.Message{
		&wire.DnnDescDestroy{Desc: od},
		&wire.DnnFinalize{Desc: od},
		&wire.DnnSetAttribute{Desc: od, Name: 904, Kind: backend.DnnTypeInt64, Count: 1, Elems: u64s(1)},
		&wire.DnnGetAttribute{Desc: od, Name: 904, Kind: backend.DnnTypeInt64, Requested: 1},
		&wire.DnnSetAttribute{Desc: mine, Name: 801, Kind: backend.DnnTypeDescriptor, Count: 1, Elems: u64s(od)},
		&wire.DnnGetAttribute{Desc: mine, Name: 801, Kind: backend.DnnTypeDescriptor, Requested: 1, Elems: u64s(od)},
		&wire.DnnSetAttribute{Desc: mine, Name: 800, Kind: backend.DnnTypeHandle, Count: 1, Elems: u64s(oh + 100)},
		&wire.DnnExecute{Handle: oh + 100, Plan: mine, Pack: mine},
		&wire.DnnDestroy{Handle: oh + 100},
	} {
		if r := other.dnn(m); backend.DnnStatus(r.Status) != backend.DnnBadParam || r.Result != int32(backend.ErrInvalidValue) {
			t.Errorf("%s with another session's id: %+v", m.Type(), r)
		}
	}
	if r := owner.dnn(&wire.DnnSetAttribute{Desc: od, Name: 904, Kind: backend.DnnTypeInt64, Count: 1, Elems: u64s(7)}); r.Status != 0 {
		t.Fatalf("owner's descriptor after the other's attempts: %+v", r)
	}
}

// A bad attribute is refused naming what is wrong, and a good one reads back as it was set,
// descriptor elements included (the simulated backend fills the caller's descriptor).
func TestDnnAttributes(t *testing.T) {
	c := newSession(t, Config{Tier: "shared", Devices: []int{0}})
	h := c.dnnID(&wire.DnnCreate{})
	tensor := c.dnnID(&wire.DnnDescCreate{Kind: 17})
	graph := c.dnnID(&wire.DnnDescCreate{Kind: 15})
	for _, tc := range []struct {
		m    *wire.DnnSetAttribute
		want backend.DnnStatus
	}{
		{&wire.DnnSetAttribute{Desc: tensor, Name: 902, Kind: 99, Count: 1, Elems: u64s(1)}, backend.DnnBadParamType},
		{&wire.DnnSetAttribute{Desc: tensor, Name: 902, Kind: backend.DnnTypeInt64, Count: 2, Elems: u64s(1)}, backend.DnnBadParam},
		{&wire.DnnSetAttribute{Desc: tensor, Name: 902, Kind: backend.DnnTypeInt64, Count: 1 << 20}, backend.DnnBadParam},
		{&wire.DnnSetAttribute{Desc: graph, Name: 801, Kind: backend.DnnTypeDescriptor, Count: 1, Elems: u64s(9999)}, backend.DnnBadParam},
		{&wire.DnnSetAttribute{Desc: graph, Name: 800, Kind: backend.DnnTypeHandle, Count: 1, Elems: u64s(tensor)}, backend.DnnBadParam},
	} {
		if r := c.dnn(tc.m); backend.DnnStatus(r.Status) != tc.want || r.Message == "" {
			t.Errorf("%+v: %+v, want status %d with a message", tc.m, r, tc.want)
		}
	}
	dims := u64s(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18)
	steps := []wire.Message{
		&wire.DnnSetAttribute{Desc: tensor, Name: 902, Kind: backend.DnnTypeInt64, Count: 18, Elems: dims},
		&wire.DnnFinalize{Desc: tensor},
		&wire.DnnSetAttribute{Desc: graph, Name: 801, Kind: backend.DnnTypeDescriptor, Count: 1, Elems: u64s(tensor)},
		&wire.DnnSetAttribute{Desc: graph, Name: 800, Kind: backend.DnnTypeHandle, Count: 1, Elems: u64s(h)},
		&wire.DnnFinalize{Desc: graph},
	}
	for _, m := range steps {
		c.dnnID(m)
	}
	// 18 int64s come back in two replies of at most 16 words.
	var got []byte
	for off := uint32(0); off < 18; off += 16 {
		r := c.dnn(&wire.DnnGetAttribute{Desc: tensor, Name: 902, Kind: backend.DnnTypeInt64, Requested: 18, Offset: off})
		if r.Value != 18 {
			t.Fatalf("count %d", r.Value)
		}
		words := []uint64{r.D0, r.D1, r.D2, r.D3, r.D4, r.D5, r.D6, r.D7, r.D8, r.D9, r.D10, r.D11, r.D12, r.D13, r.D14, r.D15}
		got = append(got, u64s(words[:min(16, 18-int(off))]...)...)
	}
	if !bytes.Equal(got, dims) {
		t.Fatalf("dims read back %v", got)
	}
	fill := c.dnnID(&wire.DnnDescCreate{Kind: 17})
	c.dnnID(&wire.DnnGetAttribute{Desc: graph, Name: 801, Kind: backend.DnnTypeDescriptor, Requested: 1, Elems: u64s(fill)})
	if r := c.dnn(&wire.DnnGetAttribute{Desc: fill, Name: 902, Kind: backend.DnnTypeInt64, Requested: 1}); r.Value != 18 || r.D0 != 1 {
		t.Fatalf("the filled-in descriptor: %+v", r)
	}
}

// FuzzDnnAttribute fuzzes the worker's attribute decoder: whatever a tenant sends is refused
// or, once accepted, reads back from the simulated backend byte for byte.
func FuzzDnnAttribute(f *testing.F) {
	f.Add(uint32(3), uint32(2), u64s(5, 6))
	f.Add(uint32(15), uint32(1), u64s(2))
	f.Add(uint32(0), uint32(1), u64s(1))
	f.Add(uint32(2), uint32(3), []byte{1, 0, 1})
	f.Add(uint32(26), uint32(1), u64s(1, 3))
	f.Add(uint32(6), uint32(1), u64s(0x7f0000000000))
	f.Fuzz(func(t *testing.T, typ, count uint32, elems []byte) {
		ctx, err := sim.New(1, 1<<20).NewContext(0)
		if err != nil {
			t.Fatal(err)
		}
		c := ctx.(backend.DnnContext)
		h, _ := c.DnnCreate()
		d, _ := c.DnnDescCreate(17)
		st := dnnState{handles: map[backend.Handle]bool{h: true}, descs: map[backend.Handle]bool{d: true}}
		m := &wire.DnnSetAttribute{Desc: uint64(d), Name: 1, Kind: typ, Count: count, Elems: elems}
		a, err := st.decodeAttr(m)
		if err != nil {
			if backend.DnnStatusOf(err) == backend.DnnSuccess {
				t.Fatalf("refusal without a status: %v", err)
			}
			return
		}
		size, _ := backend.DnnElemSize(typ)
		if a.Count*size != len(elems) {
			t.Fatalf("accepted %d elements of %d bytes in %d bytes", a.Count, size, len(elems))
		}
		if typ == backend.DnnTypeDescriptor || typ == backend.DnnTypeHandle {
			for _, id := range a.IDs() {
				if id != d && id != h {
					t.Fatalf("accepted id %d that is not the session's", id)
				}
			}
			return
		}
		if err := c.DnnSetAttribute(d, a); err != nil {
			t.Fatal(err)
		}
		c.DnnFinalize(d)
		n, got, err := c.DnnGetAttribute(d, 1, typ, a.Count, nil)
		if err != nil || n != a.Count || !bytes.Equal(got, elems) {
			t.Fatalf("read back %d %x %v, set %d %x", n, got, err, a.Count, elems)
		}
	})
}

// FuzzDnn feeds arbitrary frames to a session whose seeds reach the cuDNN dispatcher: legacy
// convolutions of any descriptors and addresses must be refused or computed, never crash the
// worker or run past memory.
func FuzzDnn(f *testing.F) {
	seed := func(msgs ...wire.Message) []byte {
		var b []byte
		for i, m := range msgs {
			b = wire.AppendFrame(b, m, 0, uint32(i+1))
		}
		return b
	}
	desc := func(w ...int32) []byte {
		var d backend.DnnDesc
		copy(d[:], w)
		b := make([]byte, 0, backend.DnnDescSize)
		for _, v := range d {
			b = binary.LittleEndian.AppendUint32(b, uint32(v))
		}
		return b
	}
	base := uint64(0x7f2c00000000)
	x := desc(1, 0, 4, 1, 1, 3, 3, 0, 0, 0, 0, 9, 9, 3, 1)
	w := desc(2, 0, 0, 4, 1, 1, 2, 2)
	cv := desc(3, 2, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 0, 1)
	y := desc(1, 0, 4, 1, 1, 2, 2, 0, 0, 0, 0, 4, 4, 2, 1)
	descs := append(append(append(append([]byte{}, x...), w...), cv...), y...)
	one := math.Float64bits(1)
	f.Add(seed(&wire.MemAlloc{Bytes: 4096}, &wire.DnnCreate{}, &wire.DnnLegacy{Op: backend.DnnOpConvForward, Handle: 2, Descs: descs,
		Args: u64s(0, base, base+64, 0, 0, base+128, one, 0)}, &wire.Synchronize{}))
	f.Add(seed(&wire.DnnCreate{}, &wire.DnnLegacy{Op: backend.DnnOpConvForwardAlgos, Handle: 1, Descs: descs, Args: u64s(8)}))
	f.Add(seed(&wire.DnnCreate{}, &wire.DnnDescCreate{Kind: 17}, &wire.DnnSetAttribute{Desc: 2, Name: 902, Kind: 3, Count: 1, Elems: u64s(4)},
		&wire.DnnFinalize{Desc: 2}, &wire.DnnGetAttribute{Desc: 2, Name: 902, Kind: 3, Requested: 1}, &wire.DnnExecute{Handle: 1, Plan: 2, Pack: 2},
		&wire.DnnDescDestroy{Desc: 2}, &wire.DnnDestroy{Handle: 1}))
	f.Fuzz(func(t *testing.T, in []byte) {
		serveBytes(t, Config{Tier: "shared", MemoryQuota: 64 << 20, Devices: []int{0}}, sim.New(1, 128<<20), false, in)
	})
}
