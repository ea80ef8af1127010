package worker

import (
	"encoding/binary"
	"math"
	"testing"
)

func f32s(v ...float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func TestReduceOps(t *testing.T) {
	in := [][]byte{f32s(1, -2, 3), f32s(4, 5, -6), f32s(7, 8, 9)}
	for op, want := range map[uint32][]float32{opSum: {12, 11, 6}, opProd: {28, -80, -162}, opMax: {7, 8, 9},
		opMin: {1, -2, -6}, opAvg: {4, 11.0 / 3, 2}} {
		if got := reduce(in, ncclFloat32, op); string(got) != string(f32s(want...)) {
			t.Errorf("op %d: got %v want %v", op, got, f32s(want...))
		}
	}
	i8 := reduce([][]byte{{100, 0x80}, {100, 1}}, ncclInt8, opSum) // wraps as int8
	if int8(i8[0]) != -56 || int8(i8[1]) != -127 {
		t.Errorf("int8 sum %v", i8)
	}
	if m := reduce([][]byte{{0xff}, {1}}, ncclInt8, opMax); m[0] != 1 { // -1 < 1 signed
		t.Errorf("int8 max %v", m)
	}
	if m := reduce([][]byte{{0xff}, {1}}, ncclUint8, opMax); m[0] != 0xff {
		t.Errorf("uint8 max %v", m)
	}
}

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
