package worker

import (
	"encoding/binary"
	"errors"
	"testing"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/backend/sim"
	"gpucloud/gpuserverd/wire"
)

func words(ws ...uint64) []byte {
	b := make([]byte, 0, 8*len(ws))
	for _, w := range ws {
		b = binary.LittleEndian.AppendUint64(b, w)
	}
	return b
}

func fnID(t testing.TB, name string) uint32 {
	f := backend.LibFuncByName(name)
	if f == nil {
		t.Fatalf("%s is not a remoted function", name)
	}
	return f.ID
}

// A library call is checked against its function before any backend sees it: ids of another
// library, short arguments, other sessions' objects, host inputs not as long as their length
// parameter says, left-over host bytes and scalars of both kinds in one call are refused with
// the library's status, naming what was wrong.
func TestLibDecodeRefuses(t *testing.T) {
	st := &libState{}
	st.add("cuFFT plan", 7)
	st.add("cuSPARSE handle", 0x1000)
	st.add("cuSPARSE spmat", 0x2000)
	st.add("cuSPARSE dnvec", 0x3000)
	makePlan := fnID(t, "cufftMakePlanMany64")
	spmv := fnID(t, "cusparseSpMV")
	nppSet := fnID(t, "nppiSet_8u_C1R_Ctx")
	n3 := words(4, 4, 4)
	plan := func(rank uint64, nBytes uint64) []byte { // plan, rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch, ws
		return words(7, rank, nBytes, 0, 1, 0, 0, 1, 0, 0x29, 1, 0)
	}
	host := func(n int) uint64 { return backend.ScalarHostBit | uint64(n) }
	cases := []struct {
		name      string
		lib       backend.Lib
		fn        uint32
		args      []byte
		host      []byte
		want      int32
		wantCause error
	}{
		{"unknown function", backend.LibFft, 12499, nil, nil, 16, backend.ErrNotSupported},
		{"another library's", backend.LibRand, makePlan, plan(3, 24), n3, 999, backend.ErrNotSupported},
		{"short arguments", backend.LibFft, makePlan, plan(3, 24)[:80], n3, 4, backend.ErrInvalidValue},
		{"not this session's plan", backend.LibFft, makePlan, append(words(8), plan(3, 24)[8:]...), n3, 1, backend.ErrInvalidValue},
		{"dimensions shorter than the rank", backend.LibFft, makePlan, plan(3, 8), n3[:8], 4, backend.ErrInvalidValue},
		{"dimensions past the host bytes", backend.LibFft, makePlan, plan(3, 24), n3[:16], 4, backend.ErrInvalidValue},
		{"a negative rank", backend.LibFft, makePlan, plan(^uint64(0), 8), n3[:8], 4, backend.ErrInvalidValue},
		{"host bytes left over", backend.LibFft, makePlan, plan(3, 24), append(n3, 1), 4, backend.ErrInvalidValue},
		{"host and device scalars", backend.LibSparse, spmv, words(0x1000, 0, host(4), 0x2000, 0x3000, 0x7f00_0000_0000, 0x3000, 0, 0, 0), []byte{1, 2, 3, 4}, 3, backend.ErrInvalidValue},
		{"a 17-byte scalar", backend.LibSparse, spmv, words(0x1000, 0, host(17), 0x2000, 0x3000, host(4), 0x3000, 0, 0, 0), make([]byte, 21), 3, backend.ErrInvalidValue},
		// NPP: nValue, pDst, nDstStep, oSizeROI (NppiSize, 8 bytes), nppStreamCtx (48 bytes)
		{"an NppiSize of 4 bytes", backend.LibNpp, nppSet, words(1, 0x1000, 64, 4, 48), make([]byte, 52), -5, backend.ErrInvalidValue},
		{"a short stream context", backend.LibNpp, nppSet, words(1, 0x1000, 64, 8, 40), make([]byte, 48), -5, backend.ErrInvalidValue},
		{"a stream context past the host bytes", backend.LibNpp, nppSet, words(1, 0x1000, 64, 8, 48), make([]byte, 50), -5, backend.ErrInvalidValue},
		{"NPP's call as nvJPEG's", backend.LibJpeg, nppSet, words(1, 0x1000, 64, 8, 48), make([]byte, 56), 9, backend.ErrNotSupported},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := st.decode(c.lib, c.fn, c.args, c.host)
			if err == nil {
				t.Fatal("accepted")
			}
			if got := backend.LibStatusOf(c.lib, err); got != c.want || !errors.Is(err, c.wantCause) {
				t.Errorf("status %d (%v), want %d (%v)", got, err, c.want, c.wantCause)
			}
		})
	}
	call, err := st.decode(backend.LibFft, makePlan, plan(3, 24), n3)
	if err != nil || len(call.Host[2]) != 24 || call.Host[3] != nil {
		t.Errorf("a good plan: %v, host %v", err, call.Host)
	}
	call, err = st.decode(backend.LibSparse, spmv, words(0x1000, 0, host(4), 0x2000, 0x3000, host(4), 0x3000, 0, 0, 0), []byte{1, 2, 3, 4, 5, 6, 7, 8})
	if err != nil || string(call.Host[2]) != "\x01\x02\x03\x04" || string(call.Host[5]) != "\x05\x06\x07\x08" {
		t.Errorf("host scalars: %v, host %v", err, call.Host)
	}
	call, err = st.decode(backend.LibNpp, nppSet, words(1, 0x1000, 64, 8, 48), make([]byte, 56))
	if err != nil || len(call.Host[3]) != 8 || len(call.Host[4]) != 48 {
		t.Errorf("an NPP call with its NppiSize and stream context: %v, host %v", err, call.Host)
	}
}

// FuzzLibDecode: no call, however malformed, makes decode panic; one it accepts names only the
// session's objects and hands the backend host inputs exactly as long as their length parameter
// says, and every host byte.
func FuzzLibDecode(f *testing.F) {
	f.Add(uint32(12035), words(7, 1, 8, 0, 1, 0, 0, 1, 0, 0x29, 1, 0), words(16))
	f.Add(uint32(10327), words(1, 0, backend.ScalarHostBit|4, 2, 3, backend.ScalarHostBit|4, 3, 0, 0, 0), make([]byte, 8))
	f.Add(uint32(12510), words(0, 100), []byte(nil))
	f.Add(uint32(15530851), words(7, 0x1000, 64, 8, 40), make([]byte, 48)) // nppiSet_8u_C1R_Ctx: NppiSize, NppStreamContext
	f.Fuzz(func(t *testing.T, fn uint32, args, host []byte) {
		st := &libState{}
		for _, k := range []string{"cuFFT plan", "cuSPARSE handle", "cuSPARSE spmat", "cuSPARSE dnvec", "cuSPARSE dnmat", "cuRAND gen",
			"cuSOLVER handle", "cuSOLVER params", "cuSOLVER syevj", "nvJPEG handle", "nvJPEG state"} {
			st.add(k, 7)
			st.add(k, 1)
			st.add(k, 2)
			st.add(k, 3)
		}
		for lib := backend.LibSparse; lib <= backend.LibNpp; lib++ {
			call, err := st.decode(lib, fn, args, host)
			if err != nil {
				continue
			}
			total := 0
			for i, p := range call.Func.Params {
				switch p.Kind {
				case backend.PObject, backend.PFree:
					if !st.has(objKind(call.Func, p), call.Words[i]) && !(p.Nullable && call.Words[i] == 0) {
						t.Fatalf("%s: accepted object %#x", call.Func.Name, call.Words[i])
					}
				case backend.PHost:
					n := uint64(p.LenAdd) // a fixed count
					if p.LenParam >= 0 {
						n = call.Words[p.LenParam]
					}
					if want := n * uint64(p.LenUnit); len(call.Host[i]) > 0 && uint64(len(call.Host[i])) != want {
						t.Fatalf("%s: %d host bytes for %d", call.Func.Name, len(call.Host[i]), want)
					}
				case backend.PByValue, backend.PStreamCtx:
					if len(call.Host[i]) != p.LenUnit {
						t.Fatalf("%s: %s of %d bytes, want %d", call.Func.Name, p.Name, len(call.Host[i]), p.LenUnit)
					}
				case backend.PStaged:
					if n := st.stagedElems(call, p) * int64(p.LenUnit); call.Words[i] != 0 && n > backend.MaxStaged {
						t.Fatalf("%s: a staged array of %d bytes", call.Func.Name, n)
					}
				}
				total += len(call.Host[i])
			}
			if total != len(host) {
				t.Fatalf("%s: %d of %d host bytes handed on", call.Func.Name, total, len(host))
			}
		}
	})
}

func (c *client) fft(name string, host []byte, ws ...uint64) wire.FftReply {
	c.t.Helper()
	var r wire.FftReply
	c.call(&wire.FftCall{Fn: fnID(c.t, name), Args: words(ws...), Host: host}, &r)
	return r
}

func (c *client) memInfo() (free uint64) {
	c.t.Helper()
	var mi wire.MemGetInfoReply
	c.call(&wire.MemGetInfo{}, &mi)
	return mi.Free
}

// A cuFFT plan's work area is the worker's allocation, charged to the session's quota, while the
// program leaves auto-allocation on (cuFFT's default): a plan past the quota answers
// CUFFT_ALLOC_FAILED, destroying one gives its area back, and a plan whose program turned
// auto-allocation off (and sets its own, as PyTorch does) is charged nothing.
func TestFftWorkAreaIsCharged(t *testing.T) {
	const quota = 4 << 20
	c := newSession(t, Config{Tier: "shared", MemoryQuota: quota, Devices: []int{0}})
	n := words(64)
	plan := func() uint64 {
		r := c.fft("cufftCreate", nil, 0)
		if r.Status != 0 {
			t.Fatalf("cufftCreate: %+v", r)
		}
		return r.O0
	}
	// plan, rank, n, inembed, istride, idist, onembed, ostride, odist, type (C2C), batch, workSize
	makePlan := func(p, batch uint64) wire.FftReply {
		return c.fft("cufftMakePlanMany64", n, p, 1, 8, 0, 1, 0, 0, 1, 0, 0x29, batch, 0)
	}
	p := plan()
	if r := makePlan(p, 8192); r.Status != 2 { // the simulated plan asks 16 bytes an element: 8 MiB
		t.Fatalf("a plan past the quota: %+v, want CUFFT_ALLOC_FAILED", r)
	}
	if r := makePlan(p, 2048); r.Status != 0 || r.O0 != 2<<20 {
		t.Fatalf("a plan of 2 MiB: %+v", r)
	}
	if free := c.memInfo(); free != quota-2<<20 {
		t.Fatalf("free %d with a 2 MiB work area, want %d", free, quota-2<<20)
	}
	if r := makePlan(p, 1024); r.Status != 0 || c.memInfo() != quota-1<<20 { // made again: the old area goes
		t.Fatalf("the plan made again: %+v, free %d", r, c.memInfo())
	}
	if r := c.fft("cufftDestroy", nil, p); r.Status != 0 || c.memInfo() != quota {
		t.Fatalf("destroyed: %+v, free %d", r, c.memInfo())
	}
	q := plan()
	if r := c.fft("cufftSetAutoAllocation", nil, q, 0); r.Status != 0 {
		t.Fatalf("cufftSetAutoAllocation: %+v", r)
	}
	if r := makePlan(q, 8192); r.Status != 0 || c.memInfo() != quota {
		t.Fatalf("a plan without auto-allocation: %+v, free %d (nothing charged)", r, c.memInfo())
	}
	if r := c.fft("cufftSetAutoAllocation", nil, 999, 0); r.Status != 1 {
		t.Fatalf("another session's plan: %+v, want CUFFT_INVALID_PLAN", r)
	}
}

// FuzzMathLibs feeds arbitrary frames to a session whose seeds reach the math libraries on the
// simulated backend: a generator filling memory, a plan transforming it, a CSR SpMV. Whatever the
// ids, sizes, layouts and addresses, each call is refused or computed, never crashes the worker
// or runs past memory.
func FuzzMathLibs(f *testing.F) {
	seed := func(msgs ...wire.Message) []byte {
		var b []byte
		for i, m := range msgs {
			b = wire.AppendFrame(b, m, 0, uint32(i+1))
		}
		return b
	}
	id := func(name string) uint32 { return fnID(f, name) }
	base := uint64(0x7f2c00000000) // the simulated device's first allocation; its objects' ids start at 5
	i32s := func(v ...int32) []byte {
		var b []byte
		for _, x := range v {
			b = binary.LittleEndian.AppendUint32(b, uint32(x))
		}
		return b
	}
	host4 := backend.ScalarHostBit | 4
	f.Add(seed(&wire.MemAlloc{Bytes: 4096},
		&wire.RandCall{Fn: id("curandCreateGenerator"), Args: words(0, 100)},
		&wire.RandCall{Fn: id("curandSetPseudoRandomGeneratorSeed"), Args: words(5, 42)},
		&wire.RandCall{Fn: id("curandGenerateNormal"), Args: words(5, base, 64, 0, 0x3f800000)},
		&wire.Synchronize{}))
	f.Add(seed(&wire.MemAlloc{Bytes: 4096},
		&wire.FftCall{Fn: id("cufftCreate"), Args: words(0)},
		&wire.FftCall{Fn: id("cufftMakePlanMany64"), Args: words(5, 1, 8, 0, 1, 0, 0, 1, 0, 0x29, 2, 0), Host: words(8)},
		&wire.FftCall{Fn: id("cufftExecC2C"), Args: words(5, base, base+1024, ^uint64(0))},
		&wire.FftCall{Fn: id("cufftMakePlanMany64"), Args: words(5, 2, 16, 16, 1, 64, 16, 1, 64, 0x2a, 1, 0), Host: words(4, 8, 4, 8)},
		&wire.FftCall{Fn: id("cufftExecR2C"), Args: words(5, base, base+2048)},
		&wire.Synchronize{}))
	f.Add(seed(&wire.MemAlloc{Bytes: 4096},
		&wire.MemcpyHtoD{Dst: base, Data: i32s(0, 1, 2, 0, 1)},
		&wire.SparseCall{Fn: id("cusparseCreate"), Args: words(0)},
		&wire.SparseCall{Fn: id("cusparseCreateCsr"), Args: words(0, 2, 2, 2, base, base+12, base+32, 2, 2, 0, 0)},
		&wire.SparseCall{Fn: id("cusparseCreateDnVec"), Args: words(0, 2, base+64, 0)},
		&wire.SparseCall{Fn: id("cusparseCreateDnVec"), Args: words(0, 2, base+128, 0)},
		&wire.SparseCall{Fn: id("cusparseSpMV"), Args: words(5, 0, host4, 6, 7, host4, 8, 0, 0, 0), Host: i32s(0x3f800000, 0)},
		&wire.Synchronize{}))
	f.Fuzz(func(t *testing.T, in []byte) {
		serveBytes(t, Config{Tier: "shared", MemoryQuota: 64 << 20, Devices: []int{0}}, sim.New(1, 128<<20), false, in)
	})
}
