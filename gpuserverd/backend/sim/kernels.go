package sim

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"gpucloud/gpuserverd/backend"
)

// kernel is a built-in kernel: its parameter layout as nvcc would pack it, and its CPU version.
type kernel struct {
	name   string
	params []backend.Param
	run    func(c *Context, cfg backend.LaunchConfig, p args) error
}

// args reads packed parameters.
type args []byte

func (a args) u32(off int) uint32  { return binary.LittleEndian.Uint32(a[off:]) }
func (a args) u64(off int) uint64  { return binary.LittleEndian.Uint64(a[off:]) }
func (a args) f32(off int) float32 { return math.Float32frombits(a.u32(off)) }

func layout(sizes ...uint32) []backend.Param {
	var ps []backend.Param
	var off uint32
	for _, s := range sizes {
		off = (off + s - 1) / s * s // natural alignment
		ps = append(ps, backend.Param{Offset: off, Size: s})
		off += s
	}
	return ps
}

// The built-in kernels, by the names a module image declares:
//
//	vector_add_f32(const float *a, const float *b, float *c, int n)   c[i] = a[i] + b[i]
//	saxpy_f32(float a, const float *x, float *y, int n)               y[i] = a*x[i] + y[i]
//	fill_u32(unsigned *p, unsigned v, int n)                          p[i] = v
//	matmul_f32(const float *A, const float *B, float *C, int M, int N, int K)  C = A*B (row-major)
//	spin(unsigned long long ns)                                       busy for ns nanoseconds
//	cond_set(unsigned long long handle, const unsigned *p)            cudaGraphSetConditional(handle, *p)
//	cond_countdown(unsigned *p, unsigned long long handle)            if (*p) --*p; cudaGraphSetConditional(handle, *p)
//	latch_wait(unsigned *latch, unsigned *out, unsigned long long ns) waits for the host's writes (latch.go)
//	count_global(unsigned *out)                                       *out = ++counter, its module's global
//
// count_global keeps its state in a module global the program need never ask the address of, as
// a CUDA kernel using a __device__ variable does: "driverglobal counter 4" in its module.
//
// Element-wise kernels cover i < min(n, threads launched), as a bounds-checked CUDA kernel does.
var builtins = map[string]*kernel{
	"vector_add_f32": {params: layout(8, 8, 8, 4), run: vectorAdd},
	"saxpy_f32":      {params: layout(4, 8, 8, 4), run: saxpy},
	"fill_u32":       {params: layout(8, 4, 4), run: fill},
	"matmul_f32":     {params: layout(8, 8, 8, 4, 4, 4), run: matmul},
	"spin":           {params: layout(8), run: spin},
	"cond_set":       {params: layout(8, 8), run: condSet},
	"cond_countdown": {params: layout(8, 8), run: condCountdown},
	"latch_wait":     {params: layout(8, 8, 8), run: latchWait},
	"count_global":   {params: layout(8), run: countGlobal},
}

func init() {
	for name, k := range builtins {
		k.name = name
	}
}

func threads(cfg backend.LaunchConfig) uint64 {
	t := uint64(1)
	for i := range 3 {
		t *= uint64(cfg.Grid[i]) * uint64(cfg.Block[i])
	}
	return t
}

// floats returns the device memory of n float32s at ptr.
func (c *Context) floats(ptr uint64, n uint64) ([]byte, error) {
	if n > math.MaxUint64/4 {
		return nil, fmt.Errorf("%w (kernel access of %d elements)", backend.ErrIllegalAddress, n)
	}
	b, err := c.mem.view(ptr, 4*n)
	if err != nil {
		return nil, fmt.Errorf("%w (kernel access)", backend.ErrIllegalAddress)
	}
	return b, nil
}

func count(cfg backend.LaunchConfig, n uint32) uint64 {
	return min(uint64(int32(max(0, int32(n)))), threads(cfg))
}

func vectorAdd(c *Context, cfg backend.LaunchConfig, p args) error {
	n := count(cfg, p.u32(24))
	a, err1 := c.floats(p.u64(0), n)
	b, err2 := c.floats(p.u64(8), n)
	out, err3 := c.floats(p.u64(16), n)
	if err := firstErr(err1, err2, err3); err != nil {
		return err
	}
	for i := uint64(0); i < 4*n; i += 4 {
		put(out[i:], get(a[i:])+get(b[i:]))
	}
	return nil
}

func saxpy(c *Context, cfg backend.LaunchConfig, p args) error {
	alpha, n := p.f32(0), count(cfg, p.u32(24))
	x, err1 := c.floats(p.u64(8), n)
	y, err2 := c.floats(p.u64(16), n)
	if err := firstErr(err1, err2); err != nil {
		return err
	}
	for i := uint64(0); i < 4*n; i += 4 {
		put(y[i:], alpha*get(x[i:])+get(y[i:]))
	}
	return nil
}

func fill(c *Context, cfg backend.LaunchConfig, p args) error {
	n := count(cfg, p.u32(12))
	out, err := c.floats(p.u64(0), n)
	if err != nil {
		return err
	}
	for i := uint64(0); i < 4*n; i += 4 {
		binary.LittleEndian.PutUint32(out[i:], p.u32(8))
	}
	return nil
}

func countGlobal(c *Context, cfg backend.LaunchConfig, p args) error {
	c.mu.Lock()
	m := c.modules[c.fnOrigin[cfg.Function]]
	c.mu.Unlock()
	if m == nil || m.sizes["counter"] < 4 {
		return fmt.Errorf("count_global: its module has no 4-byte global \"counter\": %w", backend.ErrIllegalAddress)
	}
	v, err := c.floats(m.globals["counter"], 1)
	if err != nil {
		return err
	}
	out, err := c.floats(p.u64(0), 1)
	if err != nil {
		return err
	}
	binary.LittleEndian.PutUint32(v, binary.LittleEndian.Uint32(v)+1)
	copy(out, v)
	return nil
}

func condSet(c *Context, _ backend.LaunchConfig, p args) error {
	v, err := c.floats(p.u64(8), 1)
	if err != nil {
		return err
	}
	return c.setConditional(p.u64(0), binary.LittleEndian.Uint32(v))
}

// condCountdown is the body of a loop run *p times (graphConditionalNodes' capturedWhileKernel).
func condCountdown(c *Context, _ backend.LaunchConfig, p args) error {
	v, err := c.floats(p.u64(0), 1)
	if err != nil {
		return err
	}
	n := binary.LittleEndian.Uint32(v)
	if n > 0 {
		n--
		binary.LittleEndian.PutUint32(v, n)
	}
	return c.setConditional(p.u64(8), n)
}

func matmul(c *Context, cfg backend.LaunchConfig, p args) error {
	// Sizes are 32-bit, so their products fit in 64 bits.
	m, n, k := uint64(p.u32(24)), uint64(p.u32(28)), uint64(p.u32(32))
	A, err1 := c.floats(p.u64(0), m*k)
	B, err2 := c.floats(p.u64(8), k*n)
	C, err3 := c.floats(p.u64(16), m*n)
	if err := firstErr(err1, err2, err3); err != nil {
		return err
	}
	// Thread (x, y) computes C[y][x], as a 2-D tiled kernel maps threads.
	cols := min(n, uint64(cfg.Grid[0])*uint64(cfg.Block[0]))
	rows := min(m, uint64(cfg.Grid[1])*uint64(cfg.Block[1]))
	for r := range rows {
		for col := range cols {
			var s float32
			for i := range k {
				s += get(A[4*(r*k+i):]) * get(B[4*(i*n+col):])
			}
			put(C[4*(r*n+col):], s)
		}
	}
	return nil
}

func spin(_ *Context, _ backend.LaunchConfig, p args) error {
	time.Sleep(time.Duration(min(p.u64(0), uint64(10*time.Second))))
	return nil
}

func get(b []byte) float32    { return math.Float32frombits(binary.LittleEndian.Uint32(b)) }
func put(b []byte, v float32) { binary.LittleEndian.PutUint32(b, math.Float32bits(v)) }

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

func (c *Context) LaunchKernel(cfg backend.LaunchConfig) error {
	fn, err := c.kernelWork(cfg)
	if err != nil {
		return err
	}
	return c.runKind(nodeKernel, cfg.Stream, true, fn)
}

// kernelWork checks a launch and returns the work that runs it (a launch, or a graph's node).
func (c *Context) kernelWork(cfg backend.LaunchConfig) (func() error, error) {
	k, err := c.function(cfg.Function)
	if err != nil {
		return nil, err
	}
	for i := range 3 {
		if cfg.Grid[i] == 0 || cfg.Block[i] == 0 {
			return nil, fmt.Errorf("launch %s with a zero dimension: %w", k.name, backend.ErrInvalidValue)
		}
	}
	if cfg.Block[0]*cfg.Block[1]*cfg.Block[2] > 1024 {
		return nil, fmt.Errorf("launch %s: more than 1024 threads per block: %w", k.name, backend.ErrInvalidValue)
	}
	if err := c.checkShared(cfg.Function, k.name, cfg.SharedMemBytes); err != nil {
		return nil, err
	}
	last := k.params[len(k.params)-1]
	if len(cfg.Params) < int(last.Offset+last.Size) {
		return nil, fmt.Errorf("launch %s: %d parameter bytes, need %d: %w", k.name, len(cfg.Params), last.Offset+last.Size, backend.ErrInvalidValue)
	}
	params := args(append([]byte(nil), cfg.Params...))
	cfg.Params = nil // the caller's buffer is reused
	return func() error { return k.run(c, cfg, params) }, nil
}
