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
}

func (c *Context) blasHandle(h backend.Handle) (*blasHandle, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	bh, ok := c.blas[h]
	if !ok {
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

// BlasDestroy waits for the handle's stream, as cublasDestroy synchronises.
func (c *Context) BlasDestroy(h backend.Handle) error {
	bh, err := c.blasHandle(h)
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

// scalars reads alpha and beta, from the message or from device memory.
func (c *Context) scalars(g *backend.Gemm) (alpha, beta float64, err error) {
	val := func(bits uint64) float64 {
		if g.Type == backend.BlasDouble {
			return math.Float64frombits(bits)
		}
		return float64(math.Float32frombits(uint32(bits)))
	}
	if !g.DevicePtrs {
		return val(g.Alpha), val(g.Beta), nil
	}
	read := func(p uint64) (float64, error) {
		b, err := c.mem.view(p, g.ElemSize())
		if err != nil {
			return 0, err
		}
		if g.Type == backend.BlasDouble {
			return val(binary.LittleEndian.Uint64(b)), nil
		}
		return val(uint64(binary.LittleEndian.Uint32(b))), nil
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
	e := g.ElemSize()
	get := func(buf []byte, i uint64) float64 {
		if e == 8 {
			return math.Float64frombits(binary.LittleEndian.Uint64(buf[i*8:]))
		}
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(buf[i*4:])))
	}
	put := func(buf []byte, i uint64, v float64) {
		if e == 8 {
			binary.LittleEndian.PutUint64(buf[i*8:], math.Float64bits(v))
		} else {
			binary.LittleEndian.PutUint32(buf[i*4:], math.Float32bits(float32(v)))
		}
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
					sum += get(A, oa+at(g.TransA, i, l, g.LdA)) * get(B, ob+at(g.TransB, l, j, g.LdB))
				}
				ci := oc + uint64(i) + uint64(j)*uint64(g.LdC)
				v := alpha * sum
				if beta != 0 { // beta 0 overwrites C unread, NaNs and all, as cuBLAS does
					v += beta * get(C, ci)
				}
				put(C, ci, v)
			}
		}
	}
	return nil
}
