package backend

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Lib is a math library remoted at its own API through one generic call (cuSPARSE, cuFFT,
// cuRAND, cuSOLVER, nvJPEG): NVIDIA's copies carry their own CUDA runtime, so the guest cannot run
// them.
type Lib uint8

const (
	LibSparse Lib = iota
	LibFft
	LibRand
	LibSolver
	LibJpeg
	LibNpp // NVIDIA's eleven NPP libraries, one library here (function ids tell them apart)
	numLibs
)

var libNames = [numLibs]string{"cuSPARSE", "cuFFT", "cuRAND", "cuSOLVER", "nvJPEG", "NPP"}

func (l Lib) String() string {
	if l < numLibs {
		return libNames[l]
	}
	return "lib" + strconv.Itoa(int(l))
}

// The libraries' statuses gpuserverd produces: not supported (cuRAND has none: its internal
// error), a bad value, and an allocation failure.
// cuSOLVER's: CUSOLVER_STATUS_NOT_SUPPORTED 9, INVALID_VALUE 3, NOT_INITIALIZED 1 (a handle that is
// not one), ALLOC_FAILED 2, INTERNAL_ERROR 7. nvJPEG's: NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED
// 9, INVALID_PARAMETER 2 (a bad value or object), ALLOCATOR_FAILURE 5, INTERNAL_ERROR 8. NPP's:
// NPP_NOT_SUPPORTED_MODE_ERROR -9999, NPP_BAD_ARGUMENT_ERROR -5 (NPP has no objects),
// NPP_MEMORY_ALLOCATION_ERR -9, NPP_CUDA_KERNEL_EXECUTION_ERROR -1000.
var (
	libNotSupported = [numLibs]int32{10, 16, 999, 9, 9, -9999} // CUSPARSE_STATUS_NOT_SUPPORTED, CUFFT_NOT_SUPPORTED, CURAND_STATUS_INTERNAL_ERROR
	libInvalid      = [numLibs]int32{3, 4, 104, 3, 2, -5}      // CUSPARSE_STATUS_INVALID_VALUE, CUFFT_INVALID_VALUE, CURAND_STATUS_OUT_OF_RANGE
	libBadObject    = [numLibs]int32{3, 1, 101, 1, 2, -5}      // ... CUFFT_INVALID_PLAN, CURAND_STATUS_NOT_INITIALIZED
	libAllocFailed  = [numLibs]int32{2, 2, 102, 2, 5, -9}      // CUSPARSE_STATUS_ALLOC_FAILED, CUFFT_ALLOC_FAILED, CURAND_STATUS_ALLOCATION_FAILED
	libInternal     = [numLibs]int32{7, 5, 999, 7, 8, -1000}   // CUSPARSE_STATUS_INTERNAL_ERROR, CUFFT_INTERNAL_ERROR, CURAND_STATUS_INTERNAL_ERROR
)

// LibError is a failed library call: the library's own status and what it stands for in CUDA
// terms (an error of a call sent without waiting surfaces at the next synchronising call).
type LibError struct {
	Lib    Lib
	Op     string
	Status int32
	Detail string
}

func (e *LibError) Error() string {
	if e.Detail != "" {
		return fmt.Sprintf("%s: %s: status %d: %s", e.Lib, e.Op, e.Status, e.Detail)
	}
	return fmt.Sprintf("%s: %s: status %d", e.Lib, e.Op, e.Status)
}

func (e *LibError) Unwrap() error {
	switch e.Status {
	case libNotSupported[e.Lib]:
		return ErrNotSupported
	case libBadObject[e.Lib]:
		if e.Lib == LibSolver {
			return ErrInvalidHandle // CUSOLVER_STATUS_NOT_INITIALIZED: a handle that is not one
		}
		return ErrInvalidValue
	case libInvalid[e.Lib]:
		return ErrInvalidValue
	case libAllocFailed[e.Lib]:
		return ErrOutOfMemory
	}
	return ErrLaunchFailed
}

// LibNotSupported, LibInvalid and LibBadObject make a library's refusal of f.
func LibNotSupported(f *LibFunc, format string, a ...any) error {
	return &LibError{Lib: f.Lib, Op: f.Name, Status: libNotSupported[f.Lib], Detail: fmt.Sprintf(format, a...)}
}

func LibInvalid(f *LibFunc, format string, a ...any) error {
	return &LibError{Lib: f.Lib, Op: f.Name, Status: libInvalid[f.Lib], Detail: fmt.Sprintf(format, a...)}
}

func LibBadObject(f *LibFunc, format string, a ...any) error {
	return &LibError{Lib: f.Lib, Op: f.Name, Status: libBadObject[f.Lib], Detail: fmt.Sprintf(format, a...)}
}

// LibStatusOf is the library status of err: a LibError's own; for a CUDA error the status the
// library gives such failures.
func LibStatusOf(l Lib, err error) int32 {
	if err == nil {
		return 0
	}
	var le *LibError
	if errors.As(err, &le) {
		return le.Status
	}
	switch r := ResultOf(err); {
	case r == ErrInvalidHandle && l == LibSolver:
		return libBadObject[l] // CUSOLVER_STATUS_NOT_INITIALIZED
	case r == ErrOutOfMemory:
		return libAllocFailed[l]
	case r == ErrNotSupported:
		return libNotSupported[l]
	case r == ErrInvalidValue, r == ErrInvalidHandle:
		return libInvalid[l]
	}
	return libInternal[l]
}

// ParamKind is how one parameter of a remoted library function travels (desc/<lib>.ann).
type ParamKind uint8

const (
	PValue  ParamKind = iota // a scalar or enum, as is (floats as their bits)
	PDevice                  // a device address
	PStream                  // a stream handle of this context
	PObject                  // an object of the session (Obj)
	PNew                     // an output: a new object of kind Obj
	PFree                    // an object of the session, destroyed by the call
	POut                     // an output (the word is its value before the call)
	PScalar                  // a scalar: host bytes (the word's bit 63 set, length in its low bits) or a device address
	PHost                    // host input: the word is its length, LenParam's value times LenUnit bytes (0: NULL)
	// PStaged is a host array too large for the call's host bytes, staged through device memory:
	// the word is the staging's device address (0: NULL), (LenParam's value + LenAdd) times LenUnit
	// bytes, which NVIDIA's function reads from host memory and, when Written, writes back there.
	PStaged
	PHostWork // host scratch of LenParam's value bytes (LenParam -1: LibCall.Scratch), the worker's own (the word: 1, or 0 for NULL)
	PNull     // a reserved host pointer that must be NULL
	PByValue  // a struct passed by value (NPP's NppiSize ...): its LenUnit bytes in host (the word: their length)
	// PStreamCtx is NPP's NppStreamContext by value: its LenUnit bytes in host, the first 8 the
	// context's handle of the stream (a backend runs the function on that stream).
	PStreamCtx
)

// MaxStaged bounds one staged host array (the guest's GC_STAGE_LIMIT).
const MaxStaged = 256 << 20

// MaxHostWork bounds a call's host scratch (the worker's memory, not the GPU's).
const MaxHostWork = 64 << 20

// ScalarHostBit marks a scalar word whose bytes travel in the call's host bytes.
const ScalarHostBit = uint64(1) << 63

// MaxScalar is the most bytes one host scalar has (a double complex).
const MaxScalar = 16

// MaxLibOuts is how many outputs a reply carries (SparseReply's o0-o11).
const MaxLibOuts = 12

// LibParam is one parameter of a LibFunc.
type LibParam struct {
	Kind     ParamKind
	Obj      string // the object kind of PObject, PNew, PFree
	Name     string
	LenParam int // PHost, PStaged: the parameter whose value counts the elements; PHostWork: gives the bytes
	LenAdd   int // PStaged: elements beyond LenParam's value (a CSR row pointer's m+1)
	LenUnit  int // PHost, PStaged: bytes per element
	// Nullable: a PObject that may be 0, passed to NVIDIA as NULL (a computation's
	// cusolverDnParams_t: NULL is NVIDIA's default algorithms, which PyTorch relies on).
	Nullable bool
	Written  bool // PStaged: NVIDIA's function writes the array (copied back to the guest)
	// LenVar: PStaged's count is the session's remembered value of that name (LenParam -1); "#"
	// for a fixed count (LenAdd alone).
	LenVar string
	// Record: a PValue or POut whose value the session remembers by this name (LenVar's source).
	Record string
	// Scratch: a POut that is the size of a host workspace later calls take (PHostWork without a
	// size): the session's host scratch grows to the largest.
	Scratch bool
}

// LibFunc is one remoted library function.
type LibFunc struct {
	Lib    Lib
	ID     uint32
	Name   string
	Params []LibParam
	Async  bool // launch-like: sent without waiting for a reply
	// Handle is the parameter holding the cuSPARSE handle whose pointer mode the scalars follow
	// (-1: none).
	Handle int
	// Sig is an NPP function's signature (backend/cuda's nppcalls_gen.c calls by it; 0: none).
	Sig int
}

// Outputs counts f's outputs (POut and PNew).
func (f *LibFunc) Outputs() int {
	n := 0
	for _, p := range f.Params {
		if p.Kind == POut || p.Kind == PNew {
			n++
		}
	}
	return n
}

// LibCall is one call as a backend takes it: the function, one word per parameter (streams still
// the context's handles), the host bytes of each PHost and host PScalar parameter (nil otherwise).
type LibCall struct {
	Func  *LibFunc
	Words []uint64
	Host  [][]byte
	// Scratch is the size of the host scratch of a PHostWork parameter without a size parameter:
	// the largest host workspace the library reported to this session.
	Scratch uint64
}

// LibContext is a Context that serves the math libraries. Object ids are this context's; a
// backend keeps NVIDIA's real objects behind them. LibCall returns the outputs' values in the
// order of f's output parameters.
type LibContext interface {
	LibCall(call LibCall) ([]uint64, error)
}

// libFuncDesc is a line of the generated table (libcalls_gen.go).
type libFuncDesc struct {
	lib         Lib
	id          uint32
	name, kinds string
	names       string
	async       bool
}

// nppFuncDesc is a line of NPP's generated table (nppcalls_gen.go).
type nppFuncDesc struct {
	id                 uint32
	name, kinds, names string
	sig                int
}

// LibFuncs are the remoted library functions by id.
var LibFuncs = func() map[uint32]*LibFunc {
	m := map[uint32]*LibFunc{}
	add := func(f *LibFunc, err error) {
		if err != nil {
			panic(err) // the generator checked the annotations: a bad table is a build error
		}
		if m[f.ID] != nil {
			panic(fmt.Sprintf("%s and %s share id %d", m[f.ID].Name, f.Name, f.ID))
		}
		m[f.ID] = f
	}
	for _, d := range libFuncTable {
		add(parseLibFunc(d))
	}
	for _, d := range nppFuncTable {
		f, err := parseLibFunc(libFuncDesc{lib: LibNpp, id: d.id, name: d.name, kinds: d.kinds, names: d.names})
		if f != nil {
			f.Sig = d.sig
		}
		add(f, err)
	}
	return m
}()

// LibFuncByName finds a remoted function by its name (tests, tools).
func LibFuncByName(name string) *LibFunc {
	for _, f := range LibFuncs {
		if f.Name == name {
			return f
		}
	}
	return nil
}

func parseLibFunc(d libFuncDesc) (*LibFunc, error) {
	f := &LibFunc{Lib: d.lib, ID: d.id, Name: d.name, Async: d.async, Handle: -1}
	kinds, names := strings.Fields(d.kinds), strings.Fields(d.names)
	if len(kinds) != len(names) {
		return nil, fmt.Errorf("%s: %d kinds for %d names", d.name, len(kinds), len(names))
	}
	for i, k := range kinds {
		p := LibParam{Name: names[i]}
		kind, arg, _ := strings.Cut(k, ":")
		kind, p.Record, _ = strings.Cut(kind, ">")
		switch kind {
		case "v":
			p.Kind = PValue
		case "d":
			p.Kind = PDevice
		case "z":
			p.Kind = PNull
		case "s":
			p.Kind = PStream
		case "r", "R":
			p.Kind, p.Scratch = POut, kind == "R"
		case "a":
			p.Kind = PScalar
		case "o", "o?", "n", "x":
			p.Kind = map[string]ParamKind{"o": PObject, "o?": PObject, "n": PNew, "x": PFree}[kind]
			p.Obj, p.Nullable = arg, kind == "o?"
			if arg == "handle" && kind == "o" && f.Handle < 0 {
				f.Handle = i
			}
		case "b", "c":
			p.Kind = map[string]ParamKind{"b": PByValue, "c": PStreamCtx}[kind]
			n, err := strconv.Atoi(arg)
			if err != nil || n < 1 || n > 256 || kind == "c" && n < 8 {
				return nil, fmt.Errorf("%s: struct size %q", d.name, arg)
			}
			p.LenUnit = n
		case "h", "H", "I":
			p.Kind, p.Written = PHost, kind == "H"
			if kind != "h" {
				p.Kind = PStaged
			}
			ln, unit, _ := strings.Cut(arg, "*")
			ln, add, _ := strings.Cut(ln, "+")
			p.LenParam = paramIndex(names, ln)
			if v, ok := strings.CutPrefix(ln, "$"); ok && kind != "h" {
				p.LenVar = v
			}
			u, err := strconv.Atoi(unit)
			a, aerr := strconv.Atoi(cmp.Or(add, "0"))
			if n, nerr := strconv.Atoi(ln); nerr == nil && n >= 0 { // a fixed count (PHost: LenParam -1, LenAdd elements)
				p.LenParam, a = -1, a+n
				p.LenVar = "#" // neither a parameter nor a remembered value
			}
			if p.LenParam < 0 && p.LenVar == "" || err != nil || u < 1 || aerr != nil || a < 0 {
				return nil, fmt.Errorf("%s: host length %q", d.name, arg)
			}
			p.LenUnit, p.LenAdd = u, a
		case "w":
			p.Kind, p.LenParam = PHostWork, paramIndex(names, arg)
			if p.LenParam < 0 && arg != "" {
				return nil, fmt.Errorf("%s: host scratch size %q", d.name, arg)
			}
		default:
			return nil, fmt.Errorf("%s: kind %q", d.name, k)
		}
		f.Params = append(f.Params, p)
	}
	if f.Outputs() > MaxLibOuts {
		return nil, fmt.Errorf("%s: %d outputs, a reply carries %d", d.name, f.Outputs(), MaxLibOuts)
	}
	return f, nil
}

func paramIndex(names []string, name string) int {
	for j, n := range names {
		if n == name {
			return j
		}
	}
	return -1
}

// LibStatus is a refusal of f with the library's own status st.
func LibStatus(f *LibFunc, st int32, format string, a ...any) error {
	return &LibError{Lib: f.Lib, Op: f.Name, Status: st, Detail: fmt.Sprintf(format, a...)}
}
