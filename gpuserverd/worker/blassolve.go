package worker

import (
	"fmt"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/wire"
)

// blasSolve serves cublas<t>trsm_v2, getrfBatched and getrsBatched: the handle must be one of
// the session's on d and the arguments valid before the backend sees them (the backend checks
// them again; a hostile guest gets CUBLAS_STATUS_INVALID_VALUE naming the field).
func (s *Session) blasSolve(d *device, m wire.Message) error {
	c := d.ctx
	switch m := m.(type) {
	case *wire.BlasTrsm:
		t := backend.Trsm{
			Handle: backend.Handle(m.Handle), Double: m.Dbl != 0, Side: m.Side, Uplo: m.Uplo, Trans: m.Trans,
			Diag: m.Diag, M: m.M, N: m.N, DevicePtrs: m.PointerMode == 1, Alpha: m.Alpha,
			A: m.A, LdA: m.Lda, B: m.B, LdB: m.Ldb,
		}
		if err := d.blasArgs(t.Handle, m.Dbl, m.PointerMode, t.Validate()); err != nil {
			return err
		}
		return c.BlasTrsm(t)
	case *wire.BlasGetrfBatched:
		g := backend.GetrfBatched{
			Handle: backend.Handle(m.Handle), Double: m.Dbl != 0, N: m.N, A: m.Aarray, LdA: m.Lda,
			Pivots: m.Pivots, Info: m.Info, Batch: m.Batch,
		}
		if err := d.blasArgs(g.Handle, m.Dbl, 0, g.Validate()); err != nil {
			return err
		}
		return c.BlasGetrfBatched(g)
	case *wire.BlasGetrsBatched:
		g := backend.GetrsBatched{
			Handle: backend.Handle(m.Handle), Double: m.Dbl != 0, Trans: m.Trans, N: m.N, NRHS: m.Nrhs,
			A: m.Aarray, LdA: m.Lda, Pivots: m.Pivots, B: m.Barray, LdB: m.Ldb, Batch: m.Batch,
		}
		_, verr := g.Validate()
		if err := d.blasArgs(g.Handle, m.Dbl, 0, verr); err != nil {
			return err
		}
		return c.BlasGetrsBatched(g)
	}
	return fmt.Errorf("not a cuBLAS solve: %w", backend.ErrInvalidValue)
}

// blasArgs admits a solve: a cuBLAS handle of the session (not a cuBLASLt one, which has no
// workspace), dbl and pointer_mode 0 or 1, and the arguments' own validation.
func (d *device) blasArgs(h backend.Handle, dbl, pointerMode uint32, valid error) error {
	if ws, ok := d.blas.own[h]; !ok || ws == 0 {
		return noHandle(h)
	}
	if dbl > 1 || pointerMode > 1 {
		return &backend.BlasError{Op: "solve", Status: backend.BlasInvalidValue,
			Detail: fmt.Sprintf("dbl %d / pointer_mode %d: not 0 or 1", dbl, pointerMode)}
	}
	return valid
}
