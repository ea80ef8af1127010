package worker

import (
	"encoding/binary"
	"testing"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/wire"
)

// RandTable gives a table's size, copies its first bytes to the session's memory, and refuses an
// unknown table or more bytes than the table has.
func TestRandTable(t *testing.T) {
	c := newSession(t, Config{Tier: "shared", MemoryQuota: 64 << 20, Devices: []int{0}})
	table := func(m wire.RandTable) wire.RandReply {
		var r wire.RandReply
		c.call(&m, &r)
		return r
	}
	if r := table(wire.RandTable{Table: backend.RandDirections64}); r.Status != 0 || r.O0 != 20000*64*8 {
		t.Fatalf("size of the 64-bit directions: %+v", r)
	}
	if r := table(wire.RandTable{Table: 7}); r.Status != 104 { // CURAND_STATUS_OUT_OF_RANGE
		t.Fatalf("table 7: %+v, want status 104", r)
	}
	d := c.alloc(4096)
	if r := table(wire.RandTable{Table: backend.RandScramble32, Dst: d, Bytes: 20000*4 + 1}); r.Status != 104 {
		t.Fatalf("past the table: %+v, want status 104", r)
	}
	if r := table(wire.RandTable{Table: backend.RandDirections32, Dst: d, Bytes: 256}); r.Status != 0 || r.O0 != 20000*32*4 {
		t.Fatalf("the 32-bit directions: %+v", r)
	}
	var data wire.MemcpyDtoHData
	c.call(&wire.MemcpyDtoH{Src: d, Bytes: 128}, &data)
	for k := range 32 { // dimension 0: the van der Corput vectors, as every Sobol' set's
		if v := binary.LittleEndian.Uint32(data.Data[4*k:]); v != 1<<(31-k) {
			t.Fatalf("vector %d of dimension 0: %#x, want %#x", k, v, uint32(1)<<(31-k))
		}
	}
}

// ModuleGetGlobalManaged tells a managed variable from a plain global, and StreamSetAccessPolicy
// reaches the backend, which checks the stream and the window.
func TestManagedGlobalsAndAccessPolicy(t *testing.T) {
	c := newSession(t, Config{Tier: "shared", MemoryQuota: 64 << 20, Devices: []int{0}})
	var h wire.HandleReply
	c.call(&wire.ModuleLoad{Image: []byte("GPUSIM-MODULE 1\nglobal m 8 managed 3\nglobal p 8\n")}, &h)
	if h.Result != 0 {
		t.Fatalf("module: %+v", h)
	}
	for name, want := range map[string]uint32{"m": 1, "p": 0} {
		var g wire.ModuleGlobalReply
		c.call(&wire.ModuleGetGlobalManaged{Module: h.Handle, Name: name}, &g)
		if g.Result != 0 || g.Bytes != 8 || g.Managed != want {
			t.Errorf("global %s: %+v, want managed %d", name, g, want)
		}
	}
	var g wire.ModuleGlobalReply
	c.call(&wire.ModuleGetGlobalManaged{Module: h.Handle, Name: "none"}, &g)
	if g.Result == 0 {
		t.Errorf("an unknown global: %+v", g)
	}
	var s wire.HandleReply
	c.call(&wire.StreamCreate{}, &s)
	policy := func(m wire.StreamSetAccessPolicy) int32 {
		var st wire.Status
		c.call(&m, &st)
		return st.Result
	}
	if r := policy(wire.StreamSetAccessPolicy{Stream: s.Handle, Base: 0x1000, Bytes: 1 << 20, HitRatio: 1, HitProp: 2}); r != 0 {
		t.Errorf("a window: result %d", r)
	}
	if r := policy(wire.StreamSetAccessPolicy{Stream: s.Handle, HitRatio: 1.5}); r != int32(backend.ErrInvalidValue) {
		t.Errorf("a hit ratio of 1.5: result %d", r)
	}
	if r := policy(wire.StreamSetAccessPolicy{Stream: s.Handle + 99, HitRatio: 1}); r != int32(backend.ErrInvalidHandle) {
		t.Errorf("an unknown stream: result %d", r)
	}
}
