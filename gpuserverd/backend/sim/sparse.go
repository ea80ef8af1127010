package sim

import (
	"gpucloud/gpuserverd/backend"
)

// Simulated cuSPARSE (a test double of NVIDIA's): handles, CSR and COO matrices, dense vectors
// and matrices, and SpMV/SpMM over CSR with real float or double values, computed on the CPU.
type spHandle struct{ stream backend.Handle }

type spMat struct {
	csr                  bool // else COO
	rows, cols, nnz      int64
	rowPtr, colInd, vals uint64 // CSR row offsets or COO row indices, column indices, values
	idxType, colType     uint64
	base                 int64
	valType              uint32
}

// matDescr is a legacy matrix descriptor: type, fill mode, diagonal type, index base.
type matDescr struct{ v [4]uint64 }

func matSet(field int) func(*libCall) ([]uint64, error) {
	return func(l *libCall) ([]uint64, error) {
		d, err := libObject[*matDescr](l, 0)
		if err != nil {
			return nil, err
		}
		if l.int(1) < 0 || l.int(1) > 3 {
			return nil, l.invalid("value %d", l.int(1))
		}
		d.v[field] = l.word(1)
		return nil, nil
	}
}

type dnVec struct {
	size    int64
	vals    uint64
	valType uint32
}

type dnMat struct {
	rows, cols, ld int64
	vals           uint64
	valType        uint32
	rowMajor       bool
}

const (
	spIndex32  = 2 // CUSPARSE_INDEX_32I
	spIndex64  = 3
	spOrderRow = 2
)

func spCreate(make func(l *libCall) (any, error)) func(*libCall) ([]uint64, error) {
	return func(l *libCall) ([]uint64, error) {
		o, err := make(l)
		if err != nil {
			return nil, err
		}
		return []uint64{l.c.newLibObj(o)}, nil
	}
}

func spDestroy[T any](l *libCall) ([]uint64, error) {
	if _, err := libObject[T](l, 0); err != nil {
		return nil, err
	}
	l.c.dropLibObj(l.word(0))
	return nil, nil
}

func realType(l *libCall, t uint64) (uint32, error) {
	if t != uint64(backend.DataR32F) && t != uint64(backend.DataR64F) {
		return 0, backend.LibNotSupported(l.Func, "value type %d: the simulated backend computes float and double only", t)
	}
	return uint32(t), nil
}

func newCsr(l *libCall) (any, error) {
	vt, err := realType(l, l.word(10))
	if err != nil {
		return nil, err
	}
	m := &spMat{csr: true, rows: l.int(1), cols: l.int(2), nnz: l.int(3), rowPtr: l.word(4), colInd: l.word(5), vals: l.word(6),
		idxType: l.word(7), colType: l.word(8), base: l.int(9), valType: vt}
	return m, m.check(l)
}

func newCoo(l *libCall) (any, error) {
	vt, err := realType(l, l.word(9))
	if err != nil {
		return nil, err
	}
	m := &spMat{rows: l.int(1), cols: l.int(2), nnz: l.int(3), rowPtr: l.word(4), colInd: l.word(5), vals: l.word(6),
		idxType: l.word(7), colType: l.word(7), base: l.int(8), valType: vt}
	return m, m.check(l)
}

func (m *spMat) check(l *libCall) error {
	if m.rows < 0 || m.cols < 0 || m.nnz < 0 || m.base < 0 || m.base > 1 {
		return l.invalid("rows %d, cols %d, nnz %d, base %d", m.rows, m.cols, m.nnz, m.base)
	}
	for _, t := range []uint64{m.idxType, m.colType} {
		if t != spIndex32 && t != spIndex64 {
			return l.invalid("index type %d", t)
		}
	}
	return nil
}

var sparseCalls = map[string]func(*libCall) ([]uint64, error){
	"cusparseCreate":    spCreate(func(*libCall) (any, error) { return &spHandle{}, nil }),
	"cusparseDestroy":   spDestroy[*spHandle],
	"cusparseSetStream": libSetStream(func(o *spHandle) *backend.Handle { return &o.stream }),
	"cusparseSetPointerMode": func(l *libCall) ([]uint64, error) {
		if _, err := libObject[*spHandle](l, 0); err != nil {
			return nil, err
		}
		if l.word(1) > 1 {
			return nil, l.invalid("pointer mode %d", l.word(1))
		}
		return nil, nil
	},
	"cusparseGetVersion": func(l *libCall) ([]uint64, error) {
		if _, err := libObject[*spHandle](l, 0); err != nil {
			return nil, err
		}
		return []uint64{12603}, nil
	},
	"cusparseCreateMatDescr":  spCreate(func(*libCall) (any, error) { return &matDescr{}, nil }),
	"cusparseDestroyMatDescr": spDestroy[*matDescr],
	"cusparseSetMatType":      matSet(0),
	"cusparseSetMatFillMode":  matSet(1),
	"cusparseSetMatDiagType":  matSet(2),
	"cusparseSetMatIndexBase": matSet(3),
	"cusparseCreateCsr":       spCreate(newCsr),
	"cusparseCreateConstCsr":  spCreate(newCsr),
	"cusparseCreateCoo":       spCreate(newCoo),
	"cusparseCreateConstCoo":  spCreate(newCoo),
	"cusparseDestroySpMat":    spDestroy[*spMat],
	"cusparseSpMatGetSize": func(l *libCall) ([]uint64, error) {
		m, err := libObject[*spMat](l, 0)
		if err != nil {
			return nil, err
		}
		return []uint64{uint64(m.rows), uint64(m.cols), uint64(m.nnz)}, nil
	},
	"cusparseCreateDnVec":      spCreate(newDnVec),
	"cusparseCreateConstDnVec": spCreate(newDnVec),
	"cusparseDestroyDnVec":     spDestroy[*dnVec],
	"cusparseCreateDnMat":      spCreate(newDnMat),
	"cusparseCreateConstDnMat": spCreate(newDnMat),
	"cusparseDestroyDnMat":     spDestroy[*dnMat],
	"cusparseSpMV_bufferSize":  func(l *libCall) ([]uint64, error) { return spmv(l, false) },
	"cusparseSpMV":             func(l *libCall) ([]uint64, error) { return spmv(l, true) },
	"cusparseSpMM_bufferSize":  func(l *libCall) ([]uint64, error) { return spmm(l, false) },
	"cusparseSpMM":             func(l *libCall) ([]uint64, error) { return spmm(l, true) },
}

func newDnVec(l *libCall) (any, error) {
	vt, err := realType(l, l.word(3))
	if err != nil {
		return nil, err
	}
	if l.int(1) < 0 {
		return nil, l.invalid("size %d", l.int(1))
	}
	return &dnVec{size: l.int(1), vals: l.word(2), valType: vt}, nil
}

func newDnMat(l *libCall) (any, error) {
	vt, err := realType(l, l.word(5))
	if err != nil {
		return nil, err
	}
	m := &dnMat{rows: l.int(1), cols: l.int(2), ld: l.int(3), vals: l.word(4), valType: vt, rowMajor: l.word(6) == spOrderRow}
	inner := m.rows
	if m.rowMajor {
		inner = m.cols
	}
	if m.rows < 0 || m.cols < 0 || m.ld < max(inner, 1) {
		return nil, l.invalid("rows %d, cols %d, ld %d", m.rows, m.cols, m.ld)
	}
	return m, nil
}

// at is element (i, j) of a dense matrix's storage index.
func (m *dnMat) at(i, j int64) int64 {
	if m.rowMajor {
		return i*m.ld + j
	}
	return j*m.ld + i
}

// rowsOf expands a matrix's rows: for each stored element, its row (CSR offsets or COO indices
// read from device memory), with the base taken off.
func (c *Context) entries(m *spMat) (rows, cols []int64, vals []float64, err error) {
	isz := func(t uint64) int64 { return map[uint64]int64{spIndex32: 4, spIndex64: 8}[t] }
	rd := func(b []byte, t uint64, i int64) int64 {
		if t == spIndex64 {
			return le64(b, i)
		}
		return le32(b, i)
	}
	nr := m.nnz
	if m.csr {
		nr = m.rows + 1
	}
	rb, err := c.viewElems(m.rowPtr, nr, isz(m.idxType))
	if err != nil {
		return nil, nil, nil, err
	}
	cb, err := c.viewElems(m.colInd, m.nnz, isz(m.colType))
	if err != nil {
		return nil, nil, nil, err
	}
	vb, err := c.viewElems(m.vals, m.nnz, int64(dtSize(m.valType)))
	if err != nil {
		return nil, nil, nil, err
	}
	for k := int64(0); k < m.nnz; k++ {
		vals = append(vals, load(m.valType, vb, uint64(k)))
		cols = append(cols, rd(cb, m.colType, k)-m.base)
	}
	if m.csr {
		for r := int64(0); r < m.rows; r++ {
			lo, hi := rd(rb, m.idxType, r)-m.base, rd(rb, m.idxType, r+1)-m.base
			if lo < 0 || hi < lo || hi > m.nnz {
				return nil, nil, nil, errBadIndex
			}
			for k := lo; k < hi; k++ {
				rows = append(rows, r)
			}
		}
	} else {
		for k := int64(0); k < m.nnz; k++ {
			rows = append(rows, rd(rb, m.idxType, k)-m.base)
		}
	}
	if int64(len(rows)) != m.nnz {
		return nil, nil, nil, errBadIndex
	}
	for k := range rows {
		if rows[k] < 0 || rows[k] >= m.rows || cols[k] < 0 || cols[k] >= m.cols {
			return nil, nil, nil, errBadIndex
		}
	}
	return rows, cols, vals, nil
}

var errBadIndex = backendError("a sparse matrix's index is outside it")

type backendError string

func (e backendError) Error() string { return string(e) }

// spOperands checks the handle, op and compute type of an SpMV/SpMM (parameters 0, 1 and ct).
func spOperands(l *libCall, ops []int, ct int) (*spHandle, uint32, error) {
	h, err := libObject[*spHandle](l, 0)
	if err != nil {
		return nil, 0, err
	}
	for _, i := range ops {
		if l.word(i) != 0 {
			return nil, 0, backend.LibNotSupported(l.Func, "operation %d: the simulated backend computes non-transposed products only", l.word(i))
		}
	}
	t, err := realType(l, l.word(ct))
	return h, t, err
}

// spmv: handle, opA, alpha, matA, vecX, beta, vecY, computeType, alg, buffer.
func spmv(l *libCall, run bool) ([]uint64, error) {
	h, ct, err := spOperands(l, []int{1}, 7)
	if err != nil {
		return nil, err
	}
	a, err := libObject[*spMat](l, 3)
	if err != nil {
		return nil, err
	}
	x, err := libObject[*dnVec](l, 4)
	if err != nil {
		return nil, err
	}
	y, err := libObject[*dnVec](l, 6)
	if err != nil {
		return nil, err
	}
	if x.size != a.cols || y.size != a.rows {
		return nil, l.invalid("A is %dx%d, x has %d, y %d", a.rows, a.cols, x.size, y.size)
	}
	if !run {
		return []uint64{0}, nil
	}
	A, X, Y := *a, *x, *y
	return nil, l.launch(h.stream, func() error {
		alpha, err := l.scalar(2, ct)
		if err != nil {
			return err
		}
		beta, err := l.scalar(5, ct)
		if err != nil {
			return err
		}
		rows, cols, vals, err := l.c.entries(&A)
		if err != nil {
			return err
		}
		xb, err := l.c.viewElems(X.vals, X.size, int64(dtSize(X.valType)))
		if err != nil {
			return err
		}
		yb, err := l.c.viewElems(Y.vals, Y.size, int64(dtSize(Y.valType)))
		if err != nil {
			return err
		}
		acc := make([]float64, A.rows)
		for k := range rows {
			acc[rows[k]] += vals[k] * load(X.valType, xb, uint64(cols[k]))
		}
		for i := int64(0); i < A.rows; i++ {
			v := alpha * acc[i]
			if beta != 0 {
				v += beta * load(Y.valType, yb, uint64(i))
			}
			store(Y.valType, yb, uint64(i), v)
		}
		return nil
	})
}

// spmm: handle, opA, opB, alpha, matA, matB, beta, matC, computeType, alg, buffer.
func spmm(l *libCall, run bool) ([]uint64, error) {
	h, ct, err := spOperands(l, []int{1, 2}, 8)
	if err != nil {
		return nil, err
	}
	a, err := libObject[*spMat](l, 4)
	if err != nil {
		return nil, err
	}
	b, err := libObject[*dnMat](l, 5)
	if err != nil {
		return nil, err
	}
	cm, err := libObject[*dnMat](l, 7)
	if err != nil {
		return nil, err
	}
	if b.rows != a.cols || cm.rows != a.rows || cm.cols != b.cols {
		return nil, l.invalid("A is %dx%d, B %dx%d, C %dx%d", a.rows, a.cols, b.rows, b.cols, cm.rows, cm.cols)
	}
	if work := a.nnz * b.cols; work > MaxLibWork {
		return nil, backend.LibNotSupported(l.Func, "%d multiply-adds: the simulated backend computes at most %d", work, MaxLibWork)
	}
	if !run {
		return []uint64{0}, nil
	}
	A, B, C := *a, *b, *cm
	span := func(m *dnMat) int64 { return max(m.at(m.rows-1, m.cols-1)+1, 0) }
	return nil, l.launch(h.stream, func() error {
		alpha, err := l.scalar(3, ct)
		if err != nil {
			return err
		}
		beta, err := l.scalar(6, ct)
		if err != nil {
			return err
		}
		rows, cols, vals, err := l.c.entries(&A)
		if err != nil {
			return err
		}
		bb, err := l.c.viewElems(B.vals, span(&B), int64(dtSize(B.valType)))
		if err != nil {
			return err
		}
		cb, err := l.c.viewElems(C.vals, span(&C), int64(dtSize(C.valType)))
		if err != nil {
			return err
		}
		acc := make([]float64, C.rows*C.cols)
		for k := range rows {
			for j := int64(0); j < B.cols; j++ {
				acc[rows[k]*C.cols+j] += vals[k] * load(B.valType, bb, uint64(B.at(cols[k], j)))
			}
		}
		for i := int64(0); i < C.rows; i++ {
			for j := int64(0); j < C.cols; j++ {
				v := alpha * acc[i*C.cols+j]
				if beta != 0 {
					v += beta * load(C.valType, cb, uint64(C.at(i, j)))
				}
				store(C.valType, cb, uint64(C.at(i, j)), v)
			}
		}
		return nil
	})
}
