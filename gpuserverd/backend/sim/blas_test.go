package sim

import (
	"math"
	"testing"

	"gpucloud/gpuserverd/backend"
)

// The simulated GEMM's half and bfloat16 conversions round to nearest even like the hardware's.
func TestHalfAndBFloat16(t *testing.T) {
	for _, tc := range []struct {
		f float32
		h uint16
	}{
		{0, 0}, {1, 0x3c00}, {-2, 0xc000}, {0.5, 0x3800}, {65504, 0x7bff}, {1e6, 0x7c00},
		{float32(math.Pow(2, -24)), 0x0001}, {float32(math.Pow(2, -14)), 0x0400},
		{1 + 1.0/2048, 0x3c00}, // halfway between 1 and the next half: to even
		{1 + 3.0/2048, 0x3c02}, // halfway between 1+1/1024 and 1+2/1024: to even
	} {
		if got := floatToHalf(tc.f); got != tc.h {
			t.Errorf("floatToHalf(%g) = %#04x, want %#04x", tc.f, got, tc.h)
		}
	}
	for h := uint16(0); h < 0x7c00; h++ { // every finite positive half survives the round trip
		if got := floatToHalf(halfToFloat(h)); got != h {
			t.Fatalf("half %#04x -> %g -> %#04x", h, halfToFloat(h), got)
		}
	}
	buf := make([]byte, 2)
	store(backend.DataR16BF, buf, 0, 1+1.0/256) // halfway: to even (1)
	if v := load(backend.DataR16BF, buf, 0); v != 1 {
		t.Errorf("bfloat16 of 1+2^-8 = %g, want 1", v)
	}
	store(backend.DataR16BF, buf, 0, math.NaN())
	if v := load(backend.DataR16BF, buf, 0); !math.IsNaN(v) {
		t.Errorf("bfloat16 NaN = %g", v)
	}
}
