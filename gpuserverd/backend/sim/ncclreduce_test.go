package sim

import (
	"testing"
)

func TestHalfAndBF16RoundTrip(t *testing.T) {
	for _, v := range []float32{0, 1, -2.5, 65504, 0.000061035156, 5.9604645e-08, 1024.5} {
		if got := halfToFloat(floatToHalf(v)); got != v && !(v == 1024.5 && got == 1024) {
			t.Errorf("half %v -> %v", v, got)
		}
	}
	if floatToHalf(1e6) != 0x7c00 {
		t.Errorf("overflow to inf")
	}
	h := make([]byte, 2)
	putFloat(h, 3, ncclBfloat16)
	if getFloat(h, ncclBfloat16) != 3 {
		t.Errorf("bf16 3 -> %v", getFloat(h, ncclBfloat16))
	}
	one, two := make([]byte, 2), make([]byte, 2)
	putFloat(one, 1.5, ncclFloat16)
	putFloat(two, 2.25, ncclFloat16)
	if s := getFloat(reduce([][]byte{one, two}, ncclFloat16, opSum), ncclFloat16); s != 3.75 {
		t.Errorf("half sum %v", s)
	}
}
