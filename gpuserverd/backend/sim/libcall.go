package sim

import (
	"encoding/binary"
	"fmt"
	"math"

	"gpucloud/gpuserverd/backend"
)

// The simulated backend's math libraries: a test double of NVIDIA's cuSPARSE, cuFFT, cuRAND and cuSOLVER
// that computes a few of their functions on the CPU over the context's simulated device memory,
// on the call's stream (fft.go, sparse.go, rand.go, solver.go here). Every other remoted function answers
// the library's not-supported status, saying the simulated backend does not compute it.

// MaxLibWork bounds one simulated call's multiply-adds (it runs on one CPU core).
const MaxLibWork = 1 << 26

// libCall is one call being served: the function and its words.
type libCall struct {
	c *Context
	backend.LibCall
}

func (l *libCall) word(i int) uint64 { return l.Words[i] }
func (l *libCall) int(i int) int64   { return int64(l.Words[i]) }
func (l *libCall) i32(i int) int32   { return int32(l.Words[i]) }

// f32/f64 read a float parameter from its bits.
func (l *libCall) f32(i int) float32 { return math.Float32frombits(uint32(l.Words[i])) }
func (l *libCall) f64(i int) float64 { return math.Float64frombits(l.Words[i]) }

func (l *libCall) invalid(format string, a ...any) error {
	return backend.LibInvalid(l.Func, format, a...)
}

// scalar reads a float scalar parameter of the data type dt (CUDA_R_32F 0 or CUDA_R_64F 1): its
// host bytes, or device memory when it is an address (read when the work runs, as a kernel does).
func (l *libCall) scalar(i int, dt uint32) (float64, error) {
	var b []byte
	if l.Words[i]&backend.ScalarHostBit != 0 {
		b = l.Host[i]
	} else {
		v, err := l.c.mem.view(l.Words[i], uint64(dtSize(dt)))
		if err != nil {
			return 0, err
		}
		b = v
	}
	if len(b) < dtSize(dt) {
		return 0, fmt.Errorf("scalar %s: %d bytes for type %d", l.Func.Params[i].Name, len(b), dt)
	}
	return load(dt, b, 0), nil
}

// dtSize is a real float type's element size; only CUDA_R_32F (0) and CUDA_R_64F (1) are computed.
func dtSize(dt uint32) int {
	if dt == backend.DataR64F {
		return 8
	}
	return 4
}

func (c *Context) libObj(id uint64) any {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.libObjs[id]
}

func (c *Context) newLibObj(o any) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.libObjs == nil {
		c.libObjs = map[uint64]any{}
	}
	h := c.handle()
	c.libObjs[uint64(h)] = o
	return uint64(h)
}

func (c *Context) dropLibObj(id uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.libObjs, id)
}

// libObject is the simulated object of parameter i, of type T.
func libObject[T any](l *libCall, i int) (T, error) {
	o, ok := l.c.libObj(l.Words[i]).(T)
	if !ok {
		var zero T
		return zero, backend.LibBadObject(l.Func, "%s: no such object %#x", l.Func.Params[i].Name, l.Words[i])
	}
	return o, nil
}

// libSetStream is the <lib>SetStream of objects of type T (a handle, a plan): the stream must be
// one of the context's; stream gives the object's field.
func libSetStream[T any](stream func(T) *backend.Handle) func(*libCall) ([]uint64, error) {
	return func(l *libCall) ([]uint64, error) {
		o, err := libObject[T](l, 0)
		if err != nil {
			return nil, err
		}
		if _, err := l.c.stream(backend.Handle(l.word(1))); err != nil {
			return nil, err
		}
		*stream(o) = backend.Handle(l.word(1))
		return nil, nil
	}
}

// launch queues work on stream h as a kernel: its failure is the context's sticky error.
func (l *libCall) launch(h backend.Handle, work func() error) error {
	s, err := l.c.stream(h)
	if err != nil {
		return err
	}
	name := l.Func.Name
	l.c.enqueue(h, s, func() {
		if err := work(); err != nil {
			l.c.fail(fmt.Errorf("simulated %s: %v: %w", name, err, backend.ErrIllegalAddress))
		}
	})
	return nil
}

// LibCall serves the functions the simulated libraries compute.
func (c *Context) LibCall(call backend.LibCall) ([]uint64, error) {
	// Work queued on a stream reads host scalars later: the call's bytes may be reused by then.
	orig := call.Host
	host := make([][]byte, len(call.Host))
	for i, b := range call.Host {
		host[i] = append([]byte(nil), b...)
	}
	call.Host = host
	defer func() { // what a host function wrote into a staged array goes back to the worker
		for i, p := range call.Func.Params {
			if p.Kind == backend.PStaged && p.Written {
				copy(orig[i], host[i])
			}
		}
	}()
	l := &libCall{c: c, LibCall: call}
	var serve map[string]func(*libCall) ([]uint64, error)
	switch call.Func.Lib {
	case backend.LibFft:
		serve = fftCalls
	case backend.LibSparse:
		serve = sparseCalls
	case backend.LibRand:
		serve = randCalls
	case backend.LibSolver:
		serve = solverCalls
	case backend.LibJpeg:
		serve = jpegCalls
	case backend.LibNpp:
		serve = nppCalls
	}
	fn, ok := serve[call.Func.Name]
	if !ok {
		return nil, backend.LibNotSupported(call.Func, "the simulated backend does not compute %s", call.Func.Name)
	}
	return fn(l)
}

// view is device memory for a kernel: n elements of size bytes from ptr.
func (c *Context) viewElems(ptr uint64, n, size int64) ([]byte, error) {
	if n < 0 || size <= 0 {
		return nil, fmt.Errorf("%d elements of %d bytes", n, size)
	}
	return c.mem.view(ptr, uint64(n*size))
}

func le32(b []byte, i int64) int64 { return int64(int32(binary.LittleEndian.Uint32(b[i*4:]))) }
func le64(b []byte, i int64) int64 { return int64(binary.LittleEndian.Uint64(b[i*8:])) }
