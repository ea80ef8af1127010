package sim

import (
	"encoding/binary"
	"math"
)

// NCCL's data types (ncclDataType_t) and their sizes; the fp8 types are not reduced here.
const (
	ncclInt8 = iota
	ncclUint8
	ncclInt32
	ncclUint32
	ncclInt64
	ncclUint64
	ncclFloat16
	ncclFloat32
	ncclFloat64
	ncclBfloat16
)

var elemSizes = map[uint32]int{ncclInt8: 1, ncclUint8: 1, ncclInt32: 4, ncclUint32: 4, ncclInt64: 8,
	ncclUint64: 8, ncclFloat16: 2, ncclFloat32: 4, ncclFloat64: 8, ncclBfloat16: 2}

// NCCL's reduction ops (ncclRedOp_t).
const (
	opSum = iota
	opProd
	opMax
	opMin
	opAvg
)

// reduce combines the ranks' buffers element by element in rank order, rounding to the type
// after each step as a GPU reducing in that type does; avg is the sum divided by the ranks.
func reduce(in [][]byte, dt, op uint32) []byte {
	es := elemSizes[dt]
	out := append([]byte(nil), in[0]...)
	for i := 0; i+es <= len(out); i += es {
		if isFloat(dt) {
			acc := getFloat(out[i:], dt)
			for _, b := range in[1:] {
				acc = putFloat(nil, applyF(acc, getFloat(b[i:], dt), op), dt)
			}
			if op == opAvg {
				acc = putFloat(nil, acc/float64(len(in)), dt)
			}
			putFloat(out[i:], acc, dt)
			continue
		}
		acc := getInt(out[i:], dt)
		for _, b := range in[1:] {
			acc = applyI(acc, getInt(b[i:], dt), op, isSigned(dt))
		}
		if op == opAvg {
			if isSigned(dt) {
				acc = uint64(int64(acc) / int64(len(in)))
			} else {
				acc /= uint64(len(in))
			}
		}
		putInt(out[i:], acc, dt)
	}
	return out
}

func isFloat(dt uint32) bool {
	return dt == ncclFloat16 || dt == ncclFloat32 || dt == ncclFloat64 || dt == ncclBfloat16
}

func isSigned(dt uint32) bool { return dt == ncclInt8 || dt == ncclInt32 || dt == ncclInt64 }

func applyF(a, b float64, op uint32) float64 {
	switch op {
	case opProd:
		return a * b
	case opMax:
		return math.Max(a, b)
	case opMin:
		return math.Min(a, b)
	}
	return a + b // sum, and avg's sum
}

// applyI works on the value's bits widened to 64 (sign-extended for signed types); putInt
// truncates back, so sums and products wrap as the type does.
func applyI(a, b uint64, op uint32, signed bool) uint64 {
	switch op {
	case opProd:
		return a * b
	case opMax, opMin:
		less := a < b
		if signed {
			less = int64(a) < int64(b)
		}
		if less == (op == opMin) {
			return a
		}
		return b
	}
	return a + b
}

func getInt(b []byte, dt uint32) uint64 {
	switch dt {
	case ncclInt8:
		return uint64(int64(int8(b[0])))
	case ncclUint8:
		return uint64(b[0])
	case ncclInt32:
		return uint64(int64(int32(binary.LittleEndian.Uint32(b))))
	case ncclUint32:
		return uint64(binary.LittleEndian.Uint32(b))
	}
	return binary.LittleEndian.Uint64(b)
}

func putInt(b []byte, v uint64, dt uint32) {
	switch elemSizes[dt] {
	case 1:
		b[0] = byte(v)
	case 4:
		binary.LittleEndian.PutUint32(b, uint32(v))
	default:
		binary.LittleEndian.PutUint64(b, v)
	}
}

func getFloat(b []byte, dt uint32) float64 {
	switch dt {
	case ncclFloat16:
		return float64(halfToFloat(binary.LittleEndian.Uint16(b)))
	case ncclBfloat16:
		return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b)) << 16))
	case ncclFloat32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(b))
}

// putFloat rounds v to dt, writes it to b (unless nil) and returns the rounded value.
func putFloat(b []byte, v float64, dt uint32) float64 {
	var tmp [8]byte
	if b == nil {
		b = tmp[:]
	}
	switch dt {
	case ncclFloat16:
		binary.LittleEndian.PutUint16(b, floatToHalf(float32(v)))
	case ncclBfloat16:
		binary.LittleEndian.PutUint16(b, floatToBF16(float32(v)))
	case ncclFloat32:
		binary.LittleEndian.PutUint32(b, math.Float32bits(float32(v)))
	default:
		binary.LittleEndian.PutUint64(b, math.Float64bits(v))
	}
	return getFloat(b, dt)
}

func floatToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40 // NaN stays NaN
	}
	return uint16((u + 0x7fff + (u>>16)&1) >> 16) // round to nearest even
}

// scale multiplies every element of b (of type dt) by the scalar s (one element of dt), rounding
// to the type: a pre-multiplied sum's first step on each rank.
func scale(b []byte, s []byte, dt uint32) {
	es := elemSizes[dt]
	if isFloat(dt) {
		k := getFloat(s, dt)
		for i := 0; i+es <= len(b); i += es {
			putFloat(b[i:], getFloat(b[i:], dt)*k, dt)
		}
		return
	}
	k := getInt(s, dt)
	for i := 0; i+es <= len(b); i += es {
		putInt(b[i:], getInt(b[i:], dt)*k, dt)
	}
}
