package backend

import (
	"errors"
	"fmt"
)

// SolverStatus is a cuSOLVER status code (cusolverStatus_t); SolverSuccess is 0.
type SolverStatus int32

// The cuSOLVER codes gpuserverd produces or passes through (cusolver_common.h).
const (
	SolverSuccess         SolverStatus = 0
	SolverNotInitialized  SolverStatus = 1
	SolverAllocFailed     SolverStatus = 2
	SolverInvalidValue    SolverStatus = 3
	SolverArchMismatch    SolverStatus = 4
	SolverExecutionFailed SolverStatus = 6
	SolverInternalError   SolverStatus = 7
	SolverNotSupported    SolverStatus = 9
)

// SolverError is a failed cuSOLVER call. It unwraps to the CUDA code the failure stands for, so an
// error of a call sent without waiting surfaces at the next synchronising call.
type SolverError struct {
	Op     string
	Status SolverStatus
	Detail string
}

func (e *SolverError) Error() string {
	if e.Detail != "" {
		return fmt.Sprintf("cusolver: %s: status %d: %s", e.Op, int32(e.Status), e.Detail)
	}
	return fmt.Sprintf("cusolver: %s: status %d", e.Op, int32(e.Status))
}

// Unwrap gives the CUDA code: bad arguments and handles as the driver's own, failures of
// execution as a failed launch.
func (e *SolverError) Unwrap() error {
	switch e.Status {
	case SolverNotInitialized:
		return ErrInvalidHandle
	case SolverAllocFailed:
		return ErrOutOfMemory
	case SolverInvalidValue:
		return ErrInvalidValue
	case SolverNotSupported, SolverArchMismatch:
		return ErrNotSupported
	}
	return ErrLaunchFailed
}

// SolverStatusOf is the cuSOLVER status of err: a SolverError's own; for a CUDA error (a bad
// stream, a dead context) the status cuSOLVER gives such failures.
func SolverStatusOf(err error) SolverStatus {
	if err == nil {
		return SolverSuccess
	}
	var se *SolverError
	if errors.As(err, &se) {
		return se.Status
	}
	switch ResultOf(err) {
	case ErrInvalidHandle:
		return SolverNotInitialized
	case ErrInvalidValue:
		return SolverInvalidValue
	case ErrOutOfMemory:
		return SolverAllocFailed
	case ErrNotSupported:
		return SolverNotSupported
	}
	return SolverInternalError
}

// SolverArgKind is how one parameter of a remoted cuSOLVER function travels in SolverCall's
// words (gpuserverd/apigen generates each function's list from cusolverDn.h and cusolver.ann).
type SolverArgKind uint8

const (
	SolverValue    SolverArgKind = iota // an integer or enum, sign-extended to 64 bits
	SolverFloat                         // a float's bits (low 32)
	SolverDouble                        // a double's bits
	SolverDevice                        // a device address (a matrix, a workspace, devInfo)
	SolverObject                        // an id of one of the session's objects (Obj: which kind)
	SolverNew                           // a pointer to a new object of kind Obj: an output
	SolverStream                        // a stream handle of this context (0: the default stream)
	SolverOut                           // a host scalar of Size bytes the call writes (word: 1 wanted, 0 NULL)
	SolverOutArray                      // a host array of Ref's count elements of Size bytes (word: 1 or 0)
	SolverHostWork                      // host scratch of parameter Ref's bytes (word: 1, or 0 for NULL)
)

// Object kinds of SolverObject and SolverNew.
const (
	SolverObjHandle uint8 = 1 // cusolverDnHandle_t
	SolverObjParams uint8 = 2 // cusolverDnParams_t
	SolverObjSyevj  uint8 = 3 // syevjInfo_t
	SolverObjGesvdj uint8 = 4 // gesvdjInfo_t
)

// SolverArg is one parameter of a remoted function.
type SolverArg struct {
	Kind SolverArgKind
	Obj  uint8 // the object kind of SolverObject and SolverNew
	Size uint8 // the bytes of a SolverOut, or of an element of a SolverOutArray
	Ref  int8  // the parameter giving a SolverOutArray's count or a SolverHostWork's size
	// Nullable: a SolverObject that may be 0, passed to NVIDIA as NULL (a computation's
	// cusolverDnParams_t: NULL is NVIDIA's default algorithms, which PyTorch relies on).
	Nullable bool
}

// SolverFunc is one remoted cuSOLVER function: its wire id (inside SolverCall), its name in
// NVIDIA's libcusolver and its parameters.
type SolverFunc struct {
	ID      uint32
	Name    string
	Args    []SolverArg
	Destroy bool // it destroys the object its first parameter names
}

// SolverMaxOut is how many u64 words of host outputs one reply carries (SolverReply's o0..o15,
// the wire's solver_max_out).
const SolverMaxOut = 16

// SolverMaxHostWork bounds a call's host scratch (the worker's memory, not the GPU's).
const SolverMaxHostWork = 64 << 20

// SolverOutput is one output a call asked for: its parameter and its words' place among the
// call's output words.
type SolverOutput struct {
	Param, First, Words int
}

// Outputs lists the outputs args asks for (a NULL output has no words), in parameter order: a
// new object and a scalar take one word, an array one per element (its count capped at one
// more than a reply carries, so a caller sees it too long without an overflow).
func (f SolverFunc) Outputs(args []uint64) []SolverOutput {
	var outs []SolverOutput
	n := 0
	for i, a := range f.Args {
		if args[i] == 0 {
			continue
		}
		k := 0
		switch a.Kind {
		case SolverNew, SolverOut:
			k = 1
		case SolverOutArray:
			k = int(min(args[a.Ref], SolverMaxOut+1))
		default:
			continue
		}
		outs = append(outs, SolverOutput{Param: i, First: n, Words: k})
		n += k
	}
	return outs
}

// OutWords counts the words of the outputs args asks for.
func (f SolverFunc) OutWords(args []uint64) int {
	n := 0
	for _, o := range f.Outputs(args) {
		n += o.Words
	}
	return n
}

// SolverContext is a Context that serves cuSOLVER's dense API. Object ids are this context's; a
// backend keeps NVIDIA's real objects behind them.
type SolverContext interface {
	// SolverCall runs f with one word per parameter (object ids already checked to be the
	// session's) and returns the outputs' words in parameter order: a new object's id, a
	// scalar's bytes (little-endian), an array's elements.
	SolverCall(f SolverFunc, args []uint64) ([]uint64, error)
}
