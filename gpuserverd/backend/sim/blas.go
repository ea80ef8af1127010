package sim

import (
	"encoding/binary"
	"fmt"
	"math"

	"gpucloud/gpuserverd/backend"
)

// MaxGemmWork bounds a simulated GEMM's multiply-adds: it runs on one CPU core.
const MaxGemmWork = 1 << 27

// blasHandle is a simulated cuBLAS handle: GEMMs run on the CPU, on its stream's goroutine, over
// the context's simulated device memory (a test double of NVIDIA's cuBLAS).
type blasHandle struct {
	stream    backend.Handle
	mathMode  uint32
	workspace [2]uint64 // ptr, bytes
	lt        bool      // a cublasLtHandle_t: cuBLAS calls refuse it (NVIDIA's would misread it)
}

func (c *Context) blasHandle(h backend.Handle) (*blasHandle, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	bh, ok := c.blas[h]
	if !ok || bh.lt {
		return nil, &backend.BlasError{Op: "handle", Status: backend.BlasNotInitialized, Detail: fmt.Sprintf("no cuBLAS handle %d", h)}
	}
	return bh, nil
}

// BlasCreate makes a handle on the default stream.
func (c *Context) BlasCreate() (backend.Handle, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.blas == nil {
		c.blas = map[backend.Handle]*blasHandle{}
	}
	h := c.handle()
	c.blas[h] = &blasHandle{}
	return h, nil
}

// BlasDestroy waits for the handle's stream, as cublasDestroy synchronises; it destroys
// cuBLASLt handles too.
func (c *Context) BlasDestroy(h backend.Handle) error {
	bh, err := c.ltHandle(h)
	if err != nil {
		return err
	}
	if s, err := c.stream(bh.stream); err == nil {
		s.sync()
	}
	c.mu.Lock()
	delete(c.blas, h)
	c.mu.Unlock()
	return nil
}

func (c *Context) BlasSetStream(h, stream backend.Handle) error {
	bh, err := c.blasHandle(h)
	if err != nil {
		return err
	}
	if _, err := c.stream(stream); err != nil {
		return err
	}
	bh.stream = stream
	return nil
}

func (c *Context) BlasSetMathMode(h backend.Handle, mode uint32) error {
	bh, err := c.blasHandle(h)
	if err != nil {
		return err
	}
	bh.mathMode = mode
	return nil
}

// BlasSetWorkspace records the workspace; the CPU GEMM needs none, but the range must be memory.
func (c *Context) BlasSetWorkspace(h backend.Handle, ptr, bytes uint64) error {
	bh, err := c.blasHandle(h)
	if err != nil {
		return err
	}
	if bytes > 0 {
		if _, err := c.mem.view(ptr, bytes); err != nil {
			return &backend.BlasError{Op: "cublasSetWorkspace", Status: backend.BlasInvalidValue, Detail: err.Error()}
		}
	}
	bh.workspace = [2]uint64{ptr, bytes}
	return nil
}

// BlasGemm checks g, then queues the product on the handle's stream. Operands are looked up when
// the stream reaches it (as a kernel reads memory when it runs): one outside device memory is an
// illegal address, sticky like a real GPU's.
func (c *Context) BlasGemm(g backend.Gemm) error {
	bh, err := c.blasHandle(g.Handle)
	if err != nil {
		return err
	}
	if err := g.Validate(); err != nil {
		return err
	}
	if err := simulable(&g); err != nil {
		return err
	}
	if work := uint64(g.M) * uint64(g.N) * uint64(g.K) * uint64(g.Batch); work > MaxGemmWork {
		return &backend.BlasError{Op: "gemm", Status: backend.BlasNotSupported,
			Detail: fmt.Sprintf("%d multiply-adds: the simulated backend computes at most %d", work, uint64(MaxGemmWork))}
	}
	s, err := c.stream(bh.stream)
	if err != nil {
		return err
	}
	c.enqueue(bh.stream, s, func() {
		if err := c.gemm(g); err != nil {
			c.fail(fmt.Errorf("simulated GEMM: %v: %w", err, backend.ErrIllegalAddress))
		}
	})
	return nil
}

// simulable refuses what the simulated GEMM does not compute: integer types.
func simulable(g *backend.Gemm) error {
	st, _ := backend.ScalarType(g.Compute)
	for _, t := range []uint32{g.AType, g.BType, g.CType, st} {
		if t == backend.DataR8I || t == backend.DataR32I {
			return &backend.BlasError{Op: "gemm", Status: backend.BlasNotSupported,
				Detail: fmt.Sprintf("type %d: the simulated backend computes floating-point GEMMs only", t)}
		}
	}
	return nil
}

// load reads element i of type t from buf.
func load(t uint32, buf []byte, i uint64) float64 {
	switch t {
	case backend.DataR64F:
		return math.Float64frombits(binary.LittleEndian.Uint64(buf[i*8:]))
	case backend.DataR16F:
		return float64(halfToFloat(binary.LittleEndian.Uint16(buf[i*2:])))
	case backend.DataR16BF:
		return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(buf[i*2:])) << 16))
	}
	return float64(math.Float32frombits(binary.LittleEndian.Uint32(buf[i*4:])))
}

// store writes v as element i of type t, rounded to nearest.
func store(t uint32, buf []byte, i uint64, v float64) {
	switch t {
	case backend.DataR64F:
		binary.LittleEndian.PutUint64(buf[i*8:], math.Float64bits(v))
	case backend.DataR16F:
		binary.LittleEndian.PutUint16(buf[i*2:], floatToHalf(float32(v)))
	case backend.DataR16BF:
		b := math.Float32bits(float32(v))
		if math.IsNaN(v) {
			b = 0x7fc00000
		}
		b += 0x7fff + (b>>16)&1 // round to nearest even
		binary.LittleEndian.PutUint16(buf[i*2:], uint16(b>>16))
	default:
		binary.LittleEndian.PutUint32(buf[i*4:], math.Float32bits(float32(v)))
	}
}

// halfToFloat widens an IEEE binary16.
func halfToFloat(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp, frac := uint32(h>>10)&0x1f, uint32(h)&0x3ff
	switch {
	case exp == 0x1f: // inf, NaN
		return math.Float32frombits(sign | 0xff<<23 | frac<<13)
	case exp == 0 && frac == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: frac units of 2^-24
		v := float32(frac) / (1 << 24)
		if sign != 0 {
			v = -v
		}
		return v
	}
	return math.Float32frombits(sign | (exp+112)<<23 | frac<<13)
}

// floatToHalf narrows to IEEE binary16, rounding to nearest (through float64 arithmetic).
func floatToHalf(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	a := math.Abs(float64(f))
	switch {
	case math.IsNaN(float64(f)):
		return sign | 0x7e00
	case a >= 65520: // rounds past the largest half
		return sign | 0x7c00
	case a < math.Pow(2, -14): // subnormal or zero: units of 2^-24
		return sign | uint16(math.RoundToEven(a*(1<<24)))
	}
	e := math.Floor(math.Log2(a))
	m := math.RoundToEven((a/math.Pow(2, e) - 1) * 1024)
	if m == 1024 {
		m, e = 0, e+1
	}
	return sign | uint16(e+15)<<10 | uint16(m)
}

// scalars reads alpha and beta, from the message or from device memory, as the compute type's
// scalar type.
func (c *Context) scalars(g *backend.Gemm) (alpha, beta float64, err error) {
	st, _ := backend.ScalarType(g.Compute)
	size, _ := backend.DataSize(st)
	if !g.DevicePtrs {
		var a, b [8]byte
		binary.LittleEndian.PutUint64(a[:], g.Alpha)
		binary.LittleEndian.PutUint64(b[:], g.Beta)
		return load(st, a[:], 0), load(st, b[:], 0), nil
	}
	read := func(p uint64) (float64, error) {
		b, err := c.mem.view(p, size)
		if err != nil {
			return 0, err
		}
		return load(st, b, 0), nil
	}
	if alpha, err = read(g.Alpha); err != nil {
		return 0, 0, err
	}
	beta, err = read(g.Beta)
	return alpha, beta, err
}

// operand views an operand's whole extent; an empty one is nil.
func (c *Context) operand(ptr, span uint64) ([]byte, error) {
	if span == 0 {
		return nil, nil
	}
	return c.mem.view(ptr, span)
}

func (c *Context) gemm(g backend.Gemm) error {
	alpha, beta, err := c.scalars(&g)
	if err != nil {
		return err
	}
	sa, sb, sc := g.Spans()
	A, err := c.operand(g.A, sa)
	if err != nil {
		return fmt.Errorf("A: %w", err)
	}
	B, err := c.operand(g.B, sb)
	if err != nil {
		return fmt.Errorf("B: %w", err)
	}
	C, err := c.operand(g.C, sc)
	if err != nil {
		return fmt.Errorf("C: %w", err)
	}
	// at is the index of op(X)(i, j) in a column-major X with leading dimension ld.
	at := func(trans uint32, i, j, ld int32) uint64 {
		if trans == backend.BlasOpN {
			return uint64(i) + uint64(j)*uint64(ld)
		}
		return uint64(j) + uint64(i)*uint64(ld)
	}
	for b := int32(0); b < g.Batch; b++ {
		oa, ob, oc := uint64(b)*uint64(g.StrideA), uint64(b)*uint64(g.StrideB), uint64(b)*uint64(g.StrideC)
		for j := int32(0); j < g.N; j++ {
			for i := int32(0); i < g.M; i++ {
				sum := 0.0
				for l := int32(0); l < g.K; l++ {
					sum += load(g.AType, A, oa+at(g.TransA, i, l, g.LdA)) * load(g.BType, B, ob+at(g.TransB, l, j, g.LdB))
				}
				ci := oc + uint64(i) + uint64(j)*uint64(g.LdC)
				v := alpha * sum
				if beta != 0 { // beta 0 overwrites C unread, NaNs and all, as cuBLAS does
					v += beta * load(g.CType, C, ci)
				}
				store(g.CType, C, ci, v)
			}
		}
	}
	return nil
}
