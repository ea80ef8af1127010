package backend

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

func ltAttrs(kvs ...any) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(kvs)/2))
	for i := 0; i < len(kvs); i += 2 {
		v := kvs[i+1].([]byte)
		b = binary.LittleEndian.AppendUint32(b, kvs[i].(uint32))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(v)))
		b = append(b, v...)
	}
	return b
}

func u32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
func u64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

func TestParseLtObject(t *testing.T) {
	layout := ltAttrs(LtLayoutType, u32(DataR16BF), LtLayoutRows, u64(5), LtLayoutCols, u64(7), LtLayoutLd, u64(8))
	o, err := ParseLtObject(LtMatrixLayout, layout)
	if err != nil {
		t.Fatal(err)
	}
	if o.Uint(LtLayoutRows, 0) != 5 || o.Int(LtLayoutLd, 0) != 8 || o.Int(LtLayoutBatch, 1) != 1 {
		t.Fatalf("layout read back: %+v", o)
	}
	if !bytes.Equal(o.Encode(), layout) {
		t.Fatal("Encode is not the bytes parsed")
	}
	desc := ltAttrs(LtDescCompute, u32(Compute32F), LtDescScale, u32(DataR32F), LtDescTransA, u32(1), LtDescBias, u64(0xdead0000))
	if o, err := ParseLtObject(LtMatmulDesc, desc); err != nil || o.Int(LtDescTransA, 0) != 1 || o.Uint(LtDescBias, 0) != 0xdead0000 {
		t.Fatalf("desc: %+v, %v", o, err)
	}
	bad := map[string][]byte{
		"empty":            nil,
		"unknown":          ltAttrs(LtDescCompute, u32(68), LtDescScale, u32(0), uint32(999), u32(1)),
		"wrong size":       ltAttrs(LtDescCompute, u32(68), LtDescScale, u32(0), LtDescTransA, u64(1)),
		"twice":            ltAttrs(LtDescCompute, u32(68), LtDescScale, u32(0), LtDescScale, u32(0)),
		"host object":      ltAttrs(LtDescCompute, u32(68), LtDescScale, u32(0), ltDescEmulation, u64(0x7fff0000)),
		"create arg":       ltAttrs(LtDescCompute, u32(68)),
		"truncated":        ltAttrs(LtDescCompute, u32(68), LtDescScale, u32(0))[:15],
		"trailing":         append(ltAttrs(LtDescCompute, u32(68), LtDescScale, u32(0)), 0),
		"too many":         binary.LittleEndian.AppendUint32(nil, MaxLtAttrs+1),
		"count past bytes": binary.LittleEndian.AppendUint32(nil, 3),
	}
	for name, b := range bad {
		_, err := ParseLtObject(LtMatmulDesc, b)
		var be *BlasError
		if !errors.As(err, &be) || be.Status != BlasInvalidValue {
			t.Errorf("%s: %v, want CUBLAS_STATUS_INVALID_VALUE", name, err)
		}
	}
	if _, err := ParseLtObject(LtKind(7), ltAttrs()); err == nil {
		t.Error("kind 7 accepted")
	}
}

func TestLtMatmulValidate(t *testing.T) {
	desc := func(mode uint32) LtObject {
		o, err := ParseLtObject(LtMatmulDesc, ltAttrs(LtDescCompute, u32(Compute32F), LtDescScale, u32(DataR32F), LtDescPointerMode, u32(mode)))
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	ok := []LtMatmul{
		{Desc: desc(LtPointerHost), Alpha: u32(1), Beta: u32(0)},
		{Desc: desc(LtPointerDevice), Alpha: u64(0x1000), Beta: u64(0x1004)},
		{Desc: desc(LtPointerAlphaVectorBetaZero), Alpha: u64(0x1000)},
		{Desc: desc(LtPointerAlphaVectorBetaHost), Alpha: u64(0x1000), Beta: u32(0)},
	}
	for i, m := range ok {
		if err := m.Validate(); err != nil {
			t.Errorf("%d: %v", i, err)
		}
	}
	bad := []LtMatmul{
		{Desc: desc(LtPointerHost), Alpha: u64(1), Beta: u32(0)},   // a double where the scale type is float
		{Desc: desc(LtPointerDevice), Alpha: u32(1), Beta: u64(0)}, // a value where an address goes
		{Desc: desc(LtPointerAlphaVectorBetaZero), Alpha: u64(0x1000), Beta: u32(0)},
		{Desc: desc(9), Alpha: u32(1), Beta: u32(0)},
	}
	for i, m := range bad {
		if err := m.Validate(); err == nil {
			t.Errorf("bad %d accepted", i)
		}
	}
}

func FuzzParseLtObject(f *testing.F) {
	f.Add(uint8(1), ltAttrs(LtLayoutType, u32(0), LtLayoutRows, u64(5), LtLayoutCols, u64(7), LtLayoutLd, u64(8)))
	f.Add(uint8(0), ltAttrs(LtDescCompute, u32(68), LtDescScale, u32(0), LtDescEpilogue, u32(4)))
	f.Fuzz(func(t *testing.T, kind uint8, b []byte) {
		o, err := ParseLtObject(LtKind(kind), b)
		if err != nil {
			return
		}
		if !bytes.Equal(o.Encode(), b) {
			t.Fatalf("accepted %x, encodes as %x", b, o.Encode())
		}
	})
}
