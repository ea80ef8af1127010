package sim

import "gpucloud/gpuserverd/backend"

// Simulated legacy incomplete LU (cusparse<t>csrilu02, a test double of NVIDIA's): ILU(0) of a
// square CSR matrix with 32-bit indices, in place, in float or double, computed on the CPU on the
// handle's stream. Its info records that the analysis ran, as the real one must first.
type iluInfo struct{ analysed bool }

func init() {
	sparseCalls["cusparseCreateCsrilu02Info"] = spCreate(func(*libCall) (any, error) { return &iluInfo{}, nil })
	sparseCalls["cusparseDestroyCsrilu02Info"] = spDestroy[*iluInfo]
	for t, prefix := range map[uint32]string{backend.DataR32F: "cusparseS", backend.DataR64F: "cusparseD"} {
		sparseCalls[prefix+"csrilu02_bufferSize"] = func(l *libCall) ([]uint64, error) { return ilu(l, t, 0) }
		sparseCalls[prefix+"csrilu02_analysis"] = func(l *libCall) ([]uint64, error) { return ilu(l, t, 1) }
		sparseCalls[prefix+"csrilu02"] = func(l *libCall) ([]uint64, error) { return ilu(l, t, 2) }
	}
}

// ilu serves step 0 (buffer size), 1 (analysis) or 2 (factorisation) of csrilu02 over values of
// type t: handle, m, nnz, descrA, values, rowPtr, colInd, info[, policy, buffer].
func ilu(l *libCall, t uint32, step int) ([]uint64, error) {
	h, err := libObject[*spHandle](l, 0)
	if err != nil {
		return nil, err
	}
	d, err := libObject[*matDescr](l, 3)
	if err != nil {
		return nil, err
	}
	info, err := libObject[*iluInfo](l, 7)
	if err != nil {
		return nil, err
	}
	m, nnz, base := l.int(1), l.int(2), int64(d.v[3])
	if m < 0 || nnz < 0 || m*m < nnz {
		return nil, l.invalid("m %d, nnz %d", m, nnz)
	}
	switch step {
	case 0:
		return []uint64{uint64(4*m + 128)}, nil
	case 1:
		info.analysed = true
		return nil, nil
	}
	if !info.analysed {
		return nil, l.invalid("csrilu02 before its analysis")
	}
	vals, rowPtr, colInd := l.word(4), l.word(5), l.word(6)
	return nil, l.launch(h.stream, func() error {
		rb, err := l.c.viewElems(rowPtr, m+1, 4)
		if err != nil {
			return err
		}
		cb, err := l.c.viewElems(colInd, nnz, 4)
		if err != nil {
			return err
		}
		vb, err := l.c.viewElems(vals, nnz, int64(dtSize(t)))
		if err != nil {
			return err
		}
		return ilu0(m, nnz, base, rb, cb, func(k int64) float64 { return load(t, vb, uint64(k)) },
			func(k int64, v float64) { store(t, vb, uint64(k), v) })
	})
}

// ilu0 factors A = LU on A's own sparsity pattern (unit L below the diagonal, U on and above it),
// row by row (the IKJ form), rounding each entry to the values' type as it is stored.
func ilu0(m, nnz, base int64, rb, cb []byte, get func(int64) float64, set func(int64, float64)) error {
	row := func(i int64) (int64, int64) { return le32(rb, i) - base, le32(rb, i+1) - base }
	diag := make([]int64, m)
	for i := int64(0); i < m; i++ {
		lo, hi := row(i)
		if lo < 0 || hi < lo || hi > nnz {
			return errBadIndex
		}
		diag[i] = -1
		for k := lo; k < hi; k++ {
			if le32(cb, k)-base == i {
				diag[i] = k
			}
		}
		if diag[i] < 0 {
			return backend.ErrInvalidValue // a structural zero on the diagonal
		}
	}
	at := map[int64]int64{} // column -> position, for the row being factored
	for i := int64(0); i < m; i++ {
		lo, hi := row(i)
		clear(at)
		for k := lo; k < hi; k++ {
			at[le32(cb, k)-base] = k
		}
		for k := lo; k < hi; k++ {
			j := le32(cb, k) - base
			if j >= i {
				continue
			}
			piv := get(diag[j])
			if piv == 0 {
				continue // a zero pivot: NVIDIA's reports it through zeroPivot; left as is here
			}
			lij := get(k) / piv
			set(k, lij)
			jlo, jhi := row(j)
			for q := jlo; q < jhi; q++ {
				if c := le32(cb, q) - base; c > j {
					if p, ok := at[c]; ok {
						set(p, get(p)-lij*get(q))
					}
				}
			}
		}
	}
	return nil
}
