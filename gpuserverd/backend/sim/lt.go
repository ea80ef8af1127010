package sim

import (
	"encoding/binary"
	"fmt"
	"math"

	"gpucloud/gpuserverd/backend"
)

// The simulated cuBLASLt (a test double of NVIDIA's): column-major float, double, half and
// bfloat16 matmuls on the CPU, strided batches, host or device scalars, and the epilogues
// PyTorch's addmm uses (bias, ReLU, GELU and their combinations).

// simAlgo is the first word of the one algorithm the simulated heuristic offers ("gcsim-lt").
const simAlgo = 0x746c2d6d69736367

// LtCreate makes a cuBLASLt handle (no stream of its own: each matmul names one).
func (c *Context) LtCreate() (backend.Handle, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.blas == nil {
		c.blas = map[backend.Handle]*blasHandle{}
	}
	h := c.handle()
	c.blas[h] = &blasHandle{lt: true}
	return h, nil
}

// ltProblem is a matmul the simulated cuBLASLt computes, read from its descriptors.
type ltProblem struct {
	ta, tb        uint32
	m, n, k       int32
	batch         int32
	a, b, cl, d   ltMatrix
	epilogue      uint32
	bias          uint64
	biasType      uint32
	scale         uint32
	alphaDev      bool
	betaDev, useB bool
}

// ltMatrix is one operand's layout.
type ltMatrix struct {
	typ        uint32
	rows, cols int32
	ld         int32
	stride     int64
	batch      int32
}

func ltUnsupported(f string, a ...any) error {
	return &backend.BlasError{Op: "cuBLASLt (simulated)", Status: backend.BlasNotSupported, Detail: fmt.Sprintf(f, a...)}
}

func ltInvalid(f string, a ...any) error {
	return &backend.BlasError{Op: "cuBLASLt", Status: backend.BlasInvalidValue, Detail: fmt.Sprintf(f, a...)}
}

func simLayout(name string, o backend.LtObject) (ltMatrix, error) {
	var x ltMatrix
	x.typ = uint32(o.Uint(backend.LtLayoutType, 0))
	if x.typ != backend.DataR32F && x.typ != backend.DataR64F && x.typ != backend.DataR16F && x.typ != backend.DataR16BF {
		return x, ltUnsupported("%s: type %d (the simulation computes float, double, half, bfloat16)", name, x.typ)
	}
	if order := o.Int(backend.LtLayoutOrder, 0); order != 0 {
		return x, ltUnsupported("%s: order %d (the simulation reads column-major only)", name, order)
	}
	rows, cols, ld := o.Uint(backend.LtLayoutRows, 0), o.Uint(backend.LtLayoutCols, 0), o.Int(backend.LtLayoutLd, 0)
	if rows > math.MaxInt32 || cols > math.MaxInt32 || ld > math.MaxInt32 {
		return x, ltUnsupported("%s: %dx%d ld %d past 32 bits", name, rows, cols, ld)
	}
	x.rows, x.cols, x.ld = int32(rows), int32(cols), int32(ld)
	if x.ld < max(1, x.rows) {
		return x, ltInvalid("%s: ld %d < %d rows", name, x.ld, x.rows)
	}
	batch := o.Int(backend.LtLayoutBatch, 1)
	x.stride = o.Int(backend.LtLayoutBatchStride, 0)
	if batch < 1 || batch > math.MaxInt32 || x.stride < 0 {
		return x, ltInvalid("%s: batch %d stride %d", name, batch, x.stride)
	}
	x.batch = int32(batch)
	return x, nil
}

// simProblem reads and checks a matmul's descriptors as cuBLASLt does before it runs anything.
func simProblem(desc, a, b, cl, d backend.LtObject) (*ltProblem, error) {
	p := &ltProblem{}
	var err error
	if p.a, err = simLayout("A", a); err != nil {
		return nil, err
	}
	if p.b, err = simLayout("B", b); err != nil {
		return nil, err
	}
	if p.cl, err = simLayout("C", cl); err != nil {
		return nil, err
	}
	if p.d, err = simLayout("D", d); err != nil {
		return nil, err
	}
	p.ta, p.tb = uint32(desc.Int(backend.LtDescTransA, 0)), uint32(desc.Int(backend.LtDescTransB, 0))
	if p.ta > backend.BlasOpC || p.tb > backend.BlasOpC {
		return nil, ltInvalid("operation %d/%d", p.ta, p.tb)
	}
	p.m, p.n = p.d.rows, p.d.cols
	ka, ma := p.a.cols, p.a.rows
	if p.ta != backend.BlasOpN {
		ka, ma = ma, ka
	}
	kb, nb := p.b.rows, p.b.cols
	if p.tb != backend.BlasOpN {
		kb, nb = nb, kb
	}
	if ma != p.m || nb != p.n || ka != kb || p.cl.rows != p.m || p.cl.cols != p.n {
		return nil, ltInvalid("shapes: op(A) %dx%d, op(B) %dx%d, C %dx%d, D %dx%d", ma, ka, kb, nb, p.cl.rows, p.cl.cols, p.m, p.n)
	}
	p.k = ka
	p.batch = p.d.batch
	for _, x := range []ltMatrix{p.a, p.b, p.cl} {
		if x.batch != p.batch {
			return nil, ltInvalid("batch counts %d/%d/%d/%d differ", p.a.batch, p.b.batch, p.cl.batch, p.d.batch)
		}
	}
	p.epilogue = uint32(desc.Uint(backend.LtDescEpilogue, uint64(backend.LtEpilogueDefault)))
	switch p.epilogue {
	case backend.LtEpilogueDefault, backend.LtEpilogueReLU, backend.LtEpilogueGELU:
	case backend.LtEpilogueBias, backend.LtEpilogueReLUBias, backend.LtEpilogueGELUBias:
		p.bias = desc.Uint(backend.LtDescBias, 0)
		if p.bias == 0 {
			return nil, ltInvalid("epilogue %d without a bias pointer", p.epilogue)
		}
		p.biasType = p.d.typ
		if t := desc.Int(backend.LtDescBiasType, -1); t != -1 {
			p.biasType = uint32(t)
		}
		if _, ok := backend.DataSize(p.biasType); !ok || p.biasType == backend.DataR8I || p.biasType == backend.DataR32I {
			return nil, ltUnsupported("bias type %d", p.biasType)
		}
	default:
		return nil, ltUnsupported("epilogue %d (the simulation has bias, ReLU and GELU)", p.epilogue)
	}
	p.scale = uint32(desc.Int(backend.LtDescScale, 0))
	if p.scale != backend.DataR32F && p.scale != backend.DataR64F {
		return nil, ltUnsupported("scale type %d", p.scale)
	}
	mode := desc.Int(backend.LtDescPointerMode, backend.LtPointerHost)
	if mode != backend.LtPointerHost && mode != backend.LtPointerDevice {
		return nil, ltUnsupported("pointer mode %d (the simulation reads scalars, not vectors)", mode)
	}
	p.alphaDev, p.betaDev, p.useB, _ = backend.LtScalarPlaces(mode)
	if work := uint64(p.m) * uint64(p.n) * uint64(p.k) * uint64(p.batch); work > MaxGemmWork {
		return nil, ltUnsupported("%d multiply-adds: the simulated backend computes at most %d", work, uint64(MaxGemmWork))
	}
	return p, nil
}

// LtHeuristic offers one algorithm for a matmul the simulation computes.
func (c *Context) LtHeuristic(q backend.LtQuery) ([]backend.LtResult, error) {
	if _, err := c.ltHandle(q.Handle); err != nil {
		return nil, err
	}
	if q.Requested < 1 {
		return nil, ltInvalid("requested %d results", q.Requested)
	}
	if _, err := simProblem(q.Desc, q.A, q.B, q.C, q.D); err != nil {
		return nil, err
	}
	return []backend.LtResult{{Algo: [8]uint64{simAlgo}, State: backend.BlasSuccess, Waves: 1}}, nil
}

// LtMatmul checks m, then queues it on its stream; operands are read when the stream reaches
// it, and one outside device memory is an illegal address (sticky), as on a GPU.
func (c *Context) LtMatmul(m backend.LtMatmul) error {
	if _, err := c.ltHandle(m.Handle); err != nil {
		return err
	}
	if err := m.Validate(); err != nil {
		return err
	}
	p, err := simProblem(m.Desc, m.ADesc, m.BDesc, m.CDesc, m.DDesc)
	if err != nil {
		return err
	}
	if m.Algo != nil && m.Algo[0] != simAlgo {
		return ltInvalid("algo %#x is not one the heuristic gave", m.Algo[0])
	}
	s, err := c.stream(m.Stream)
	if err != nil {
		return err
	}
	c.enqueue(m.Stream, s, func() {
		if err := c.ltRun(p, &m); err != nil {
			c.fail(fmt.Errorf("simulated cublasLtMatmul: %v: %w", err, backend.ErrIllegalAddress))
		}
	})
	return nil
}

// ltDefaults are the defaults cublasLt.h documents for the attributes the simulation computes
// with (the rest are NOT_SUPPORTED when unset).
var ltDefaults = [3]map[uint32]int64{
	backend.LtMatmulDesc: {backend.LtDescPointerMode: backend.LtPointerHost, backend.LtDescTransA: 0, backend.LtDescTransB: 0,
		backend.LtDescEpilogue: int64(backend.LtEpilogueDefault), backend.LtDescBias: 0, backend.LtDescBiasType: -1},
	backend.LtMatrixLayout: {backend.LtLayoutOrder: 0, backend.LtLayoutBatch: 1, backend.LtLayoutBatchStride: 0},
	backend.LtPreference:   {1: 0}, // CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES
}

// LtGetAttribute answers from what was set, else from ltDefaults.
func (c *Context) LtGetAttribute(o backend.LtObject, attr uint32, size uint64) ([]byte, uint64, error) {
	want, ok := backend.LtAttrSize(o.Kind, attr)
	if !ok {
		return nil, 0, ltInvalid("attribute %d of a %s", attr, o.Kind)
	}
	if size == 0 {
		return nil, uint64(want), nil
	}
	if size < uint64(want) {
		return nil, 0, ltInvalid("attribute %d: buffer of %d bytes, want %d", attr, size, want)
	}
	if v, ok := o.Get(attr); ok {
		return v, uint64(want), nil
	}
	d, ok := ltDefaults[o.Kind][attr]
	if !ok {
		return nil, 0, ltUnsupported("attribute %d's default", attr)
	}
	return binary.LittleEndian.AppendUint64(nil, uint64(d))[:want], uint64(want), nil
}

// ltHandle accepts a cuBLASLt handle or a cuBLAS one (NVIDIA's cublasHandle_t is one too).
func (c *Context) ltHandle(h backend.Handle) (*blasHandle, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	bh, ok := c.blas[h]
	if !ok {
		return nil, &backend.BlasError{Op: "handle", Status: backend.BlasNotInitialized, Detail: fmt.Sprintf("no cuBLASLt handle %d", h)}
	}
	return bh, nil
}

func (c *Context) ltScalar(v []byte, dev bool, t uint32) (float64, error) {
	if !dev {
		var b [16]byte
		copy(b[:], v)
		return load(t, b[:], 0), nil
	}
	size, _ := backend.DataSize(t)
	b, err := c.mem.view(binary.LittleEndian.Uint64(v), size)
	if err != nil {
		return 0, err
	}
	return load(t, b, 0), nil
}

func gelu(x float64) float64 {
	return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
}

func (c *Context) ltRun(p *ltProblem, m *backend.LtMatmul) error {
	alpha, err := c.ltScalar(m.Alpha, p.alphaDev, p.scale)
	if err != nil {
		return fmt.Errorf("alpha: %w", err)
	}
	beta := 0.0
	if p.useB {
		if beta, err = c.ltScalar(m.Beta, p.betaDev, p.scale); err != nil {
			return fmt.Errorf("beta: %w", err)
		}
	}
	view := func(name string, ptr uint64, x ltMatrix) ([]byte, error) {
		size, _ := backend.DataSize(x.typ)
		b, err := c.operand(ptr, backend.Span(x.rows, x.cols, x.ld, x.stride, x.batch, size))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return b, nil
	}
	kRows := func(x ltMatrix) ltMatrix { // op(A) and op(B) are not read when k is 0
		if p.k == 0 {
			x.rows = 0
		}
		return x
	}
	A, err := view("A", m.A, kRows(p.a))
	if err != nil {
		return err
	}
	B, err := view("B", m.B, kRows(p.b))
	if err != nil {
		return err
	}
	var C []byte
	if beta != 0 {
		if C, err = view("C", m.C, p.cl); err != nil {
			return err
		}
	}
	D, err := view("D", m.D, p.d)
	if err != nil {
		return err
	}
	var bias []byte
	if p.bias != 0 {
		bs, _ := backend.DataSize(p.biasType)
		if bias, err = c.mem.view(p.bias, uint64(p.m)*bs); err != nil {
			return fmt.Errorf("bias: %w", err)
		}
	}
	at := func(trans uint32, i, j, ld int32) uint64 {
		if trans == backend.BlasOpN {
			return uint64(i) + uint64(j)*uint64(ld)
		}
		return uint64(j) + uint64(i)*uint64(ld)
	}
	for bt := int32(0); bt < p.batch; bt++ {
		oa, ob := uint64(bt)*uint64(p.a.stride), uint64(bt)*uint64(p.b.stride)
		oc, od := uint64(bt)*uint64(p.cl.stride), uint64(bt)*uint64(p.d.stride)
		for j := int32(0); j < p.n; j++ {
			for i := int32(0); i < p.m; i++ {
				sum := 0.0
				for l := int32(0); l < p.k; l++ {
					sum += load(p.a.typ, A, oa+at(p.ta, i, l, p.a.ld)) * load(p.b.typ, B, ob+at(p.tb, l, j, p.b.ld))
				}
				v := alpha * sum
				if beta != 0 { // beta 0: C unread, as cuBLASLt
					v += beta * load(p.cl.typ, C, oc+uint64(i)+uint64(j)*uint64(p.cl.ld))
				}
				if bias != nil {
					v += load(p.biasType, bias, uint64(i))
				}
				switch p.epilogue {
				case backend.LtEpilogueReLU, backend.LtEpilogueReLUBias:
					v = math.Max(v, 0)
				case backend.LtEpilogueGELU, backend.LtEpilogueGELUBias:
					v = gelu(v)
				}
				store(p.d.typ, D, od+uint64(i)+uint64(j)*uint64(p.d.ld), v)
			}
		}
	}
	return nil
}
