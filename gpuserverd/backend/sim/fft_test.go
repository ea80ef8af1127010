package sim

import (
	"encoding/binary"
	"testing"

	"gpucloud/gpuserverd/backend"
)

// A simulated plan's advanced layout whose elements would fall outside it (an embedding smaller
// than its dimension, a negative stride, a layout past 2^40 elements) is refused when the plan is
// made, before any transform reads memory by it.
func TestFftPlanRefusesBadLayouts(t *testing.T) {
	c := newContext(New(1, 1<<30), 0)
	call := func(name string, words []uint64, host ...[]byte) ([]uint64, error) {
		f := backend.LibFuncByName(name)
		h := make([][]byte, len(words))
		for i, p := range f.Params {
			if p.Kind == backend.PHost && words[i] != 0 {
				h[i], host = host[0], host[1:]
			}
		}
		return c.LibCall(backend.LibCall{Func: f, Words: words, Host: h})
	}
	i64 := func(v ...int64) []byte {
		var b []byte
		for _, x := range v {
			b = binary.LittleEndian.AppendUint64(b, uint64(x))
		}
		return b
	}
	out, err := call("cufftCreate", []uint64{0})
	if err != nil {
		t.Fatal(err)
	}
	p := out[0]
	for _, c := range []struct {
		name             string
		inemb, onemb     int64
		istride, ostride int64
		idist, odist     int64
	}{
		{"embedding smaller than the dimension", 4, 8, 1, 1, 8, 8},
		{"negative stride", 8, 8, -1, 1, 8, 8},
		{"negative distance", 8, 8, 1, 1, -8, 8},
		{"past 2^40 elements", 1 << 40, 8, 1, 1, 8, 8},
	} {
		// plan, rank, n, inembed, istride, idist, onembed, ostride, odist, type (C2C), batch, workSize
		_, err := call("cufftMakePlanMany64", []uint64{p, 1, 8, 8, uint64(c.istride), uint64(c.idist), 8, uint64(c.ostride), uint64(c.odist), 0x29, 2, 0},
			i64(8), i64(c.inemb), i64(c.onemb))
		if backend.LibStatusOf(backend.LibFft, err) != 4 {
			t.Errorf("%s: %v, want CUFFT_INVALID_VALUE", c.name, err)
		}
	}
	if _, err := call("cufftMakePlanMany64", []uint64{p, 1, 8, 8, 1, 8, 8, 1, 8, 0x29, 2, 0}, i64(8), i64(8), i64(8)); err != nil {
		t.Errorf("a good layout: %v", err)
	}
}
