package sim

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"

	"gpucloud/gpuserverd/backend"
)

// The simulated triangular solve and batched LU (a test double of NVIDIA's cuBLAS): the same
// checks, then the arithmetic in float64 on the CPU, on the handle's stream, over the context's
// simulated device memory; an operand outside it is an illegal address, sticky like a GPU's.

// BlasTrsm checks t, then queues the solve on the handle's stream.
func (c *Context) BlasTrsm(t backend.Trsm) error {
	if err := t.Validate(); err != nil {
		return err
	}
	k := uint64(t.K())
	return c.blasQueue(t.Handle, "trsm", product(k, k, uint64(max(t.M, t.N))), func() error { return c.trsm(t) })
}

// BlasGetrfBatched checks g, then queues the factorisations.
func (c *Context) BlasGetrfBatched(g backend.GetrfBatched) error {
	if err := g.Validate(); err != nil {
		return err
	}
	n := uint64(g.N)
	return c.blasQueue(g.Handle, "getrfBatched", product(n, n, n, uint64(g.Batch)), func() error { return c.getrfBatched(g) })
}

// BlasGetrsBatched checks g, then queues the solves.
func (c *Context) BlasGetrsBatched(g backend.GetrsBatched) error {
	if _, err := g.Validate(); err != nil {
		return err
	}
	n := uint64(g.N)
	return c.blasQueue(g.Handle, "getrsBatched", product(n, n, uint64(g.NRHS), uint64(g.Batch)), func() error { return c.getrsBatched(g) })
}

// product multiplies sizes, saturating at math.MaxUint64 (hostile sizes must not wrap past the
// work bound).
func product(v ...uint64) uint64 {
	p := uint64(1)
	for _, x := range v {
		hi, lo := bits.Mul64(p, x)
		if hi != 0 {
			return math.MaxUint64
		}
		p = lo
	}
	return p
}

// blasQueue runs fn on h's stream when the stream reaches it, refusing more than MaxGemmWork
// multiply-adds (one CPU core computes them).
func (c *Context) blasQueue(h backend.Handle, op string, work uint64, fn func() error) error {
	bh, err := c.blasHandle(h)
	if err != nil {
		return err
	}
	if work > MaxGemmWork {
		return &backend.BlasError{Op: op, Status: backend.BlasNotSupported,
			Detail: fmt.Sprintf("%d multiply-adds: the simulated backend computes at most %d", work, uint64(MaxGemmWork))}
	}
	s, err := c.stream(bh.stream)
	if err != nil {
		return err
	}
	c.enqueue(bh.stream, s, func() {
		if err := fn(); err != nil {
			c.fail(fmt.Errorf("simulated %s: %v: %w", op, err, backend.ErrIllegalAddress))
		}
	})
	return nil
}

func dataType(double bool) uint32 {
	if double {
		return backend.DataR64F
	}
	return backend.DataR32F
}

// matrix is a column-major view of rows x cols elements of type typ, ld apart.
type matrix struct {
	buf []byte
	typ uint32
	ld  uint64
}

func (m matrix) get(i, j int) float64    { return load(m.typ, m.buf, uint64(i)+uint64(j)*m.ld) }
func (m matrix) set(i, j int, v float64) { store(m.typ, m.buf, uint64(i)+uint64(j)*m.ld, v) }

func (c *Context) matrixAt(ptr uint64, rows, cols, ld int32, double bool) (matrix, error) {
	m := matrix{typ: dataType(double), ld: uint64(ld)}
	span := backend.Span(rows, cols, ld, 0, 1, elemBytes(double))
	if span == 0 {
		return m, nil
	}
	b, err := c.mem.view(ptr, span)
	m.buf = b
	return m, err
}

func elemBytes(double bool) uint64 {
	if double {
		return 8
	}
	return 4
}

func (c *Context) trsm(t backend.Trsm) error {
	if t.M == 0 || t.N == 0 {
		return nil
	}
	typ := dataType(t.Double)
	var alpha float64
	if t.DevicePtrs {
		b, err := c.mem.view(t.Alpha, elemBytes(t.Double))
		if err != nil {
			return fmt.Errorf("alpha: %w", err)
		}
		alpha = load(typ, b, 0)
	} else {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], t.Alpha)
		alpha = load(typ, b[:], 0)
	}
	k := int(t.K())
	A, err := c.matrixAt(t.A, t.K(), t.K(), t.LdA, t.Double)
	if err != nil {
		return fmt.Errorf("A: %w", err)
	}
	B, err := c.matrixAt(t.B, t.M, t.N, t.LdB, t.Double)
	if err != nil {
		return fmt.Errorf("B: %w", err)
	}
	// T = op(A), dense, zero outside its triangle.
	lower := t.Uplo == 0
	T := make([][]float64, k)
	for i := range T {
		T[i] = make([]float64, k)
	}
	for i := range T {
		for j := range k {
			if (lower && j > i) || (!lower && j < i) {
				continue
			}
			v := A.get(i, j)
			if i == j && t.Diag == 1 {
				v = 1
			}
			if t.Trans == backend.BlasOpN {
				T[i][j] = v
			} else {
				T[j][i] = v
			}
		}
	}
	tLower := lower == (t.Trans == backend.BlasOpN)
	x := make([]float64, k)
	if t.Side == 0 { // T X = alpha B, column by column
		for j := range int(t.N) {
			for i := range k {
				x[i] = alpha * B.get(i, j)
			}
			substitute(T, tLower, false, x)
			for i := range k {
				B.set(i, j, x[i])
			}
		}
		return nil
	}
	for i := range int(t.M) { // X T = alpha B: T^T x^T = alpha b^T, row by row
		for j := range k {
			x[j] = alpha * B.get(i, j)
		}
		substitute(T, !tLower, true, x)
		for j := range k {
			B.set(i, j, x[j])
		}
	}
	return nil
}

// substitute solves M x = x in place, M being T (or T^T with transposed) and lower triangular
// when lower, else upper.
func substitute(T [][]float64, lower, transposed bool, x []float64) {
	at := func(i, j int) float64 {
		if transposed {
			return T[j][i]
		}
		return T[i][j]
	}
	n := len(x)
	for s := range n {
		i := s
		if !lower {
			i = n - 1 - s
		}
		v := x[i]
		for j := range n {
			if j != i && ((lower && j < i) || (!lower && j > i)) {
				v -= at(i, j) * x[j]
			}
		}
		x[i] = v / at(i, i)
	}
}

// pointers reads batch device pointers from the device array at p.
func (c *Context) pointers(p uint64, batch int32) ([]uint64, error) {
	b, err := c.mem.view(p, 8*uint64(batch))
	if err != nil {
		return nil, err
	}
	ps := make([]uint64, batch)
	for i := range ps {
		ps[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	return ps, nil
}

// int32s views n device ints at p; nil for p 0.
func (c *Context) int32s(p uint64, n int) ([]byte, error) {
	if p == 0 || n == 0 {
		return nil, nil
	}
	return c.mem.view(p, 4*uint64(n))
}

func (c *Context) getrfBatched(g backend.GetrfBatched) error {
	if g.Batch == 0 {
		return nil
	}
	ptrs, err := c.pointers(g.A, g.Batch)
	if err != nil {
		return fmt.Errorf("Aarray: %w", err)
	}
	n := int(g.N)
	piv, err := c.int32s(g.Pivots, n*len(ptrs))
	if err != nil {
		return fmt.Errorf("PivotArray: %w", err)
	}
	info, err := c.int32s(g.Info, len(ptrs))
	if err != nil {
		return fmt.Errorf("infoArray: %w", err)
	}
	for b, p := range ptrs {
		A, err := c.matrixAt(p, g.N, g.N, g.LdA, g.Double)
		if err != nil {
			return fmt.Errorf("Aarray[%d]: %w", b, err)
		}
		singular := 0
		for k := range n {
			r := k
			if piv != nil { // partial pivoting: the largest magnitude below the diagonal
				for i := k + 1; i < n; i++ {
					if abs(A.get(i, k)) > abs(A.get(r, k)) {
						r = i
					}
				}
				binary.LittleEndian.PutUint32(piv[4*(b*n+k):], uint32(r+1))
				for j := range n {
					vk, vr := A.get(k, j), A.get(r, j)
					A.set(k, j, vr)
					A.set(r, j, vk)
				}
			}
			d := A.get(k, k)
			if d == 0 {
				if singular == 0 {
					singular = k + 1
				}
				continue
			}
			for i := k + 1; i < n; i++ {
				l := A.get(i, k) / d
				A.set(i, k, l)
				for j := k + 1; j < n; j++ {
					A.set(i, j, A.get(i, j)-l*A.get(k, j))
				}
			}
		}
		binary.LittleEndian.PutUint32(info[4*b:], uint32(singular))
	}
	return nil
}

func abs(v float64) float64 {
	if v < 0 {
		return -v
	}
	return v
}

func (c *Context) getrsBatched(g backend.GetrsBatched) error {
	if g.Batch == 0 || g.N == 0 || g.NRHS == 0 {
		return nil
	}
	as, err := c.pointers(g.A, g.Batch)
	if err != nil {
		return fmt.Errorf("Aarray: %w", err)
	}
	bs, err := c.pointers(g.B, g.Batch)
	if err != nil {
		return fmt.Errorf("Barray: %w", err)
	}
	n := int(g.N)
	piv, err := c.int32s(g.Pivots, n*len(as))
	if err != nil {
		return fmt.Errorf("devIpiv: %w", err)
	}
	for b := range as {
		A, err := c.matrixAt(as[b], g.N, g.N, g.LdA, g.Double)
		if err != nil {
			return fmt.Errorf("Aarray[%d]: %w", b, err)
		}
		B, err := c.matrixAt(bs[b], g.N, g.NRHS, g.LdB, g.Double)
		if err != nil {
			return fmt.Errorf("Barray[%d]: %w", b, err)
		}
		swap := func(j, k int) {
			if piv == nil {
				return
			}
			r := int(int32(binary.LittleEndian.Uint32(piv[4*(b*n+k):]))) - 1
			if r >= 0 && r < n && r != k {
				vk, vr := B.get(k, j), B.get(r, j)
				B.set(k, j, vr)
				B.set(r, j, vk)
			}
		}
		// L and U as dense matrices: L unit lower, U upper.
		T := make([][]float64, n)
		for i := range T {
			T[i] = make([]float64, n)
			for j := range n {
				T[i][j] = A.get(i, j)
			}
		}
		L := make([][]float64, n)
		for i := range L {
			L[i] = make([]float64, n)
			copy(L[i], T[i][:i])
			L[i][i] = 1
		}
		x := make([]float64, n)
		for j := range int(g.NRHS) {
			if g.Trans == backend.BlasOpN { // A = P L U: x = U^-1 L^-1 P^T b
				for k := range n {
					swap(j, k)
				}
				for i := range n {
					x[i] = B.get(i, j)
				}
				substitute(L, true, false, x)
				substitute(T, false, false, x)
			} else { // A^T = U^T L^T P^T: x = P L^-T U^-T b
				for i := range n {
					x[i] = B.get(i, j)
				}
				substitute(T, true, true, x)
				substitute(L, false, true, x)
			}
			for i := range n {
				B.set(i, j, x[i])
			}
			if g.Trans != backend.BlasOpN {
				for k := n - 1; k >= 0; k-- {
					swap(j, k)
				}
			}
		}
	}
	return nil
}
