package worker

import (
	"fmt"

	"gpucloud/gpuserverd/backend"
)

// fftArea is what the worker keeps of a cuFFT plan: whether the program left auto-allocation on
// (cuFFT's default) and the work area the worker allocated for it, charged to the quota.
//
// NVIDIA's cuFFT would allocate an auto-allocated plan's work area itself, where no quota sees it.
// So every plan is made with NVIDIA's auto-allocation off; the worker allocates the size the plan
// reports through the session's quota and hands it to the plan (cufftSetWorkArea), as a program
// that manages its own work areas (PyTorch) does. A plan past the quota answers CUFFT_ALLOC_FAILED.
type fftArea struct {
	auto       bool
	ptr, bytes uint64
}

const fftAllocFailed = 2 // CUFFT_ALLOC_FAILED

// fftBefore answers what the worker keeps itself: cufftSetAutoAllocation is recorded, not sent
// (NVIDIA's stays off); turning it off gives the worker's work area back.
func (s *Session) fftBefore(d *device, call backend.LibCall) (bool, error) {
	if call.Func.Name != "cufftSetAutoAllocation" {
		return false, nil
	}
	a := d.lib.fft[call.Words[0]]
	if a == nil {
		return true, backend.LibBadObject(call.Func, "no plan %d", call.Words[0])
	}
	a.auto = int32(call.Words[1]) != 0
	if !a.auto {
		s.fftRelease(d, a)
	}
	return true, nil
}

// fftAfter follows a successful call: a new plan's auto-allocation off in NVIDIA's cuFFT, a made
// plan's work area allocated (auto-allocation on) or the program's own in place of the worker's,
// a destroyed plan's given back.
func (s *Session) fftAfter(d *device, c backend.LibContext, call backend.LibCall, outs []uint64) error {
	f, plan := call.Func, call.Words[0]
	switch f.Name {
	case "cufftCreate":
		plan = outs[0]
		if d.lib.fft == nil {
			d.lib.fft = map[uint64]*fftArea{}
		}
		d.lib.fft[plan] = &fftArea{auto: true}
		return libInvoke(c, "cufftSetAutoAllocation", plan, 0)
	case "cufftDestroy":
		if a := d.lib.fft[plan]; a != nil {
			s.fftRelease(d, a)
		}
		delete(d.lib.fft, plan)
	case "cufftSetWorkArea":
		if a := d.lib.fft[plan]; a != nil {
			s.fftRelease(d, a)
		}
	case "cufftMakePlanMany64", "cufftXtMakePlanMany":
		a := d.lib.fft[plan]
		if a == nil || !a.auto {
			return nil
		}
		s.fftRelease(d, a)
		size := outs[0]
		if size == 0 {
			return nil
		}
		p, err := s.alloc(d, size)
		if err != nil {
			return backend.LibStatus(f, fftAllocFailed, "the plan's work area of %d bytes: %v", size, err)
		}
		if err := libInvoke(c, "cufftSetWorkArea", plan, p); err != nil {
			_ = s.free(d, p)
			return err
		}
		a.ptr, a.bytes = p, size
	}
	return nil
}

// fftRelease frees the worker's work area of a plan, if it has one.
func (s *Session) fftRelease(d *device, a *fftArea) {
	if a.ptr != 0 {
		if err := s.free(d, a.ptr); err != nil {
			s.log.Warn("freeing a cuFFT plan's work area", "bytes", a.bytes, "err", err)
		}
	}
	a.ptr, a.bytes = 0, 0
}

// libInvoke is a library call of the worker's own (its words already the backend's).
func libInvoke(c backend.LibContext, name string, words ...uint64) error {
	f := backend.LibFuncByName(name)
	if f == nil {
		return fmt.Errorf("%s is not a remoted function: %w", name, backend.ErrUnknown)
	}
	_, err := c.LibCall(backend.LibCall{Func: f, Words: words, Host: make([][]byte, len(words))})
	return err
}
