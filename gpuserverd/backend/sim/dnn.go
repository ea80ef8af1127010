package sim

import (
	"fmt"
	"math"
	"math/bits"

	"gpucloud/gpuserverd/backend"
)

// A simulated cuDNN (a test double of NVIDIA's): handles, backend descriptors that keep their
// attributes, and one legacy operation computed on the CPU, an fp32 NCHW convolution forward.
// It runs no execution plans.

// MaxConvWork bounds a simulated convolution's multiply-adds: it runs on one CPU core.
const MaxConvWork = 1 << 26

type dnnHandle struct{ stream backend.Handle }

type dnnDesc struct {
	kind      uint32
	attrs     map[uint32]backend.DnnAttr
	finalized bool
}

func dnnErr(op string, st backend.DnnStatus, f string, a ...any) error {
	return &backend.DnnError{Op: op, Status: st, Detail: fmt.Sprintf(f, a...)}
}

func (c *Context) dnnHandle(h backend.Handle) (*dnnHandle, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	dh, ok := c.dnn[h]
	if !ok {
		return nil, dnnErr("handle", backend.DnnBadParam, "no cuDNN handle %d", h)
	}
	return dh, nil
}

func (c *Context) dnnDesc(h backend.Handle) (*dnnDesc, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.dnnDescs[h]
	if !ok {
		return nil, dnnErr("descriptor", backend.DnnBadParam, "no backend descriptor %d", h)
	}
	return d, nil
}

func (c *Context) DnnCreate() (backend.Handle, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dnn == nil {
		c.dnn = map[backend.Handle]*dnnHandle{}
	}
	h := c.handle()
	c.dnn[h] = &dnnHandle{}
	return h, nil
}

// DnnDestroy waits for the handle's stream, as cudnnDestroy synchronises.
func (c *Context) DnnDestroy(h backend.Handle) error {
	dh, err := c.dnnHandle(h)
	if err != nil {
		return err
	}
	if s, err := c.stream(dh.stream); err == nil {
		s.sync()
	}
	c.mu.Lock()
	delete(c.dnn, h)
	c.mu.Unlock()
	return nil
}

func (c *Context) DnnSetStream(h, stream backend.Handle) error {
	dh, err := c.dnnHandle(h)
	if err != nil {
		return err
	}
	if _, err := c.stream(stream); err != nil {
		return err
	}
	dh.stream = stream
	return nil
}

// DnnDescCreate makes a descriptor of any of cuDNN 9's kinds (0..32).
func (c *Context) DnnDescCreate(kind uint32) (backend.Handle, error) {
	if kind > 32 {
		return 0, dnnErr("cudnnBackendCreateDescriptor", backend.DnnBadParam, "descriptor type %d", kind)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dnnDescs == nil {
		c.dnnDescs = map[backend.Handle]*dnnDesc{}
	}
	h := c.handle()
	c.dnnDescs[h] = &dnnDesc{kind: kind, attrs: map[uint32]backend.DnnAttr{}}
	return h, nil
}

func (c *Context) DnnDescDestroy(h backend.Handle) error {
	if _, err := c.dnnDesc(h); err != nil {
		return err
	}
	c.mu.Lock()
	delete(c.dnnDescs, h)
	c.mu.Unlock()
	return nil
}

// DnnSetAttribute keeps the attribute; a finalized descriptor takes no more, as in cuDNN.
func (c *Context) DnnSetAttribute(h backend.Handle, a backend.DnnAttr) error {
	d, err := c.dnnDesc(h)
	if err != nil {
		return err
	}
	if d.finalized {
		return dnnErr("cudnnBackendSetAttribute", backend.DnnBadParam, "descriptor %d is finalized", h)
	}
	a.Elems = append([]byte(nil), a.Elems...)
	d.attrs[a.Name] = a
	return nil
}

// DnnGetAttribute reads a finalized descriptor's attribute back; descriptor-typed elements
// fill the given descriptors with copies of those it holds, as cuDNN fills them in.
func (c *Context) DnnGetAttribute(h backend.Handle, name, typ uint32, requested int, in []backend.Handle) (int, []byte, error) {
	const op = "cudnnBackendGetAttribute"
	d, err := c.dnnDesc(h)
	if err != nil {
		return 0, nil, err
	}
	if !d.finalized {
		return 0, nil, dnnErr(op, backend.DnnBadParamFinalized, "descriptor %d is not finalized", h)
	}
	a, ok := d.attrs[name]
	if !ok {
		return 0, nil, dnnErr(op, backend.DnnBadParam, "attribute %d not set", name)
	}
	if a.Type != typ {
		return 0, nil, dnnErr(op, backend.DnnBadParamType, "attribute %d has type %d, not %d", name, a.Type, typ)
	}
	n := min(requested, a.Count)
	if typ != backend.DnnTypeDescriptor {
		size, _ := backend.DnnElemSize(typ)
		return a.Count, a.Elems[:n*size], nil
	}
	src := a.IDs()
	for i := 0; i < n && i < len(in); i++ {
		from, err := c.dnnDesc(src[i])
		if err != nil {
			return 0, nil, err
		}
		to, err := c.dnnDesc(in[i])
		if err != nil {
			return 0, nil, err
		}
		if to.kind != from.kind {
			return 0, nil, dnnErr(op, backend.DnnBadParamDescType, "element %d: descriptor type %d, not %d", i, to.kind, from.kind)
		}
		c.mu.Lock()
		to.attrs, to.finalized = map[uint32]backend.DnnAttr{}, from.finalized
		for k, v := range from.attrs {
			to.attrs[k] = v
		}
		c.mu.Unlock()
	}
	return a.Count, nil, nil
}

func (c *Context) DnnFinalize(h backend.Handle) error {
	d, err := c.dnnDesc(h)
	if err != nil {
		return err
	}
	d.finalized = true
	return nil
}

// DnnExecute: the simulated backend runs no graphs.
func (c *Context) DnnExecute(h, plan, pack backend.Handle) error {
	if _, err := c.dnnHandle(h); err != nil {
		return err
	}
	return dnnErr("cudnnBackendExecute", backend.DnnNotSupported, "the simulated backend runs no execution plans")
}

// DnnLegacy computes an fp32 convolution forward (and answers its algorithm and workspace
// queries); every other legacy call is CUDNN_STATUS_NOT_SUPPORTED here.
func (c *Context) DnnLegacy(call backend.DnnLegacyCall) (backend.DnnLegacyResult, error) {
	var r backend.DnnLegacyResult
	dh, err := c.dnnHandle(call.Handle)
	if err != nil {
		return r, err
	}
	switch call.Op {
	case backend.DnnOpConvForwardAlgos, backend.DnnOpConvForwardWs:
		if _, err := convShape(call.Descs); err != nil {
			return r, err
		}
		if call.Op == backend.DnnOpConvForwardAlgos {
			// One result: IMPLICIT_GEMM (0), success, 0 ms, no workspace, deterministic (1).
			r.Value, r.Data[0] = 1, 1<<16
		}
		return r, nil
	case backend.DnnOpConvForward:
		if len(call.Args) != 8 {
			return r, dnnErr("cudnnConvolutionForward", backend.DnnBadParam, "%d argument words, want 8", len(call.Args))
		}
		sh, err := convShape(call.Descs)
		if err != nil {
			return r, err
		}
		if w := sh.work(); w > MaxConvWork {
			return r, dnnErr("cudnnConvolutionForward", backend.DnnNotSupported, "%d multiply-adds: the simulated backend computes at most %d", w, MaxConvWork)
		}
		s, err := c.stream(dh.stream)
		if err != nil {
			return r, err
		}
		a := call.Args
		alpha, beta := math.Float64frombits(a[6]), math.Float64frombits(a[7])
		c.enqueue(dh.stream, s, func() {
			if err := c.conv(sh, a[1], a[2], a[5], alpha, beta); err != nil {
				c.fail(fmt.Errorf("simulated convolution: %v: %w", err, backend.ErrIllegalAddress))
			}
		})
		return r, nil
	}
	return r, dnnErr("cudnn legacy call", backend.DnnNotSupported, "op %d: the simulated backend computes fp32 convolution forward only", call.Op)
}

// convGeom is a 2-D NCHW convolution's shape.
type convGeom struct {
	n, c, h, w, k, r, s, p, q int
	pad, str, dil             [2]int
	xs, ys                    [4]int // element strides of x and y
	flip                      bool   // CUDNN_CONVOLUTION (0) rather than CROSS_CORRELATION (1)
}

// work is the multiply-adds, saturating at MaxUint64 (the sizes are the tenant's).
func (g *convGeom) work() uint64 {
	w := uint64(1)
	for _, v := range []int{g.n, g.k, g.p, g.q, g.c, g.r, g.s} {
		hi, lo := bits.Mul64(w, uint64(v))
		if hi != 0 {
			return math.MaxUint64
		}
		w = lo
	}
	return w
}

// convShape checks descriptors x, w, conv, y for what the simulated convolution computes.
func convShape(ds []backend.DnnDesc) (*convGeom, error) {
	bad := func(f string, a ...any) (*convGeom, error) {
		return nil, dnnErr("convolution", backend.DnnBadParam, f, a...)
	}
	if len(ds) != 4 || ds[0].Kind() != backend.DnnDescTensor || ds[1].Kind() != backend.DnnDescFilter ||
		ds[2].Kind() != backend.DnnDescConv || ds[3].Kind() != backend.DnnDescTensor {
		return bad("want x, w, conv and y descriptors")
	}
	x, w, cv, y := &ds[0], &ds[1], &ds[2], &ds[3]
	xd, wd, yd := x.Dims(), w.Dims(), y.Dims()
	if len(xd) != 4 || len(wd) != 4 || len(yd) != 4 || cv[1] != 2 {
		return bad("not a 2-D convolution of 4-D tensors")
	}
	if x[1] != 0 || w[1] != 0 || y[1] != 0 || w[2] != 0 || cv[21] != 0 || cv[22] > 1 {
		return nil, dnnErr("convolution", backend.DnnNotSupported, "the simulated backend computes fp32 NCHW ungrouped convolutions only")
	}
	g := &convGeom{n: int(xd[0]), c: int(xd[1]), h: int(xd[2]), w: int(xd[3]), k: int(wd[0]), r: int(wd[2]), s: int(wd[3]), flip: cv[20] == 0}
	for i := 0; i < 2; i++ {
		g.pad[i], g.str[i], g.dil[i] = int(cv[2+i]), int(cv[8+i]), int(cv[14+i])
		if g.pad[i] < 0 || g.str[i] < 1 || g.dil[i] < 1 {
			return bad("pad, stride or dilation out of range")
		}
	}
	if int(wd[1]) != g.c || g.n < 1 || g.c < 1 || g.k < 1 || g.r < 1 || g.s < 1 {
		return bad("x %v and w %v do not match", xd, wd)
	}
	g.p = (g.h+2*g.pad[0]-g.dil[0]*(g.r-1)-1)/g.str[0] + 1
	g.q = (g.w+2*g.pad[1]-g.dil[1]*(g.s-1)-1)/g.str[1] + 1
	if g.p < 1 || g.q < 1 || int(yd[0]) != g.n || int(yd[1]) != g.k || int(yd[2]) != g.p || int(yd[3]) != g.q {
		return bad("y %v, want [%d %d %d %d]", yd, g.n, g.k, g.p, g.q)
	}
	for i, v := range x.Strides() {
		g.xs[i] = int(v)
	}
	for i, v := range y.Strides() {
		g.ys[i] = int(v)
	}
	for i := 0; i < 4; i++ {
		if g.xs[i] < 1 || g.ys[i] < 1 || g.xs[i] > 1<<30 || g.ys[i] > 1<<30 {
			return bad("tensor stride out of range")
		}
	}
	if g.h > 1<<20 || g.w > 1<<20 || g.pad[0] > 1<<20 || g.pad[1] > 1<<20 || g.str[0] > 1<<20 || g.str[1] > 1<<20 ||
		g.dil[0] > 1<<20 || g.dil[1] > 1<<20 {
		return bad("spatial size out of range")
	}
	return g, nil
}

// span is the bytes a tensor of dims with element strides reaches, as fp32.
func span(dims []int, strides [4]int) uint64 {
	last := 0
	for i, d := range dims {
		last += (d - 1) * strides[i]
	}
	return uint64(last+1) * 4
}

func (c *Context) conv(g *convGeom, xp, wp, yp uint64, alpha, beta float64) error {
	X, err := c.mem.view(xp, span([]int{g.n, g.c, g.h, g.w}, g.xs))
	if err != nil {
		return fmt.Errorf("x: %w", err)
	}
	W, err := c.mem.view(wp, uint64(g.k*g.c*g.r*g.s)*4)
	if err != nil {
		return fmt.Errorf("w: %w", err)
	}
	Y, err := c.mem.view(yp, span([]int{g.n, g.k, g.p, g.q}, g.ys))
	if err != nil {
		return fmt.Errorf("y: %w", err)
	}
	for n := 0; n < g.n; n++ {
		for k := 0; k < g.k; k++ {
			for p := 0; p < g.p; p++ {
				for q := 0; q < g.q; q++ {
					sum := 0.0
					for ch := 0; ch < g.c; ch++ {
						for r := 0; r < g.r; r++ {
							for s := 0; s < g.s; s++ {
								ih := p*g.str[0] - g.pad[0] + r*g.dil[0]
								iw := q*g.str[1] - g.pad[1] + s*g.dil[1]
								if ih < 0 || ih >= g.h || iw < 0 || iw >= g.w {
									continue
								}
								fr, fs := r, s
								if g.flip {
									fr, fs = g.r-1-r, g.s-1-s
								}
								xi := n*g.xs[0] + ch*g.xs[1] + ih*g.xs[2] + iw*g.xs[3]
								wi := ((k*g.c+ch)*g.r+fr)*g.s + fs
								sum += load(backend.DataR32F, X, uint64(xi)) * load(backend.DataR32F, W, uint64(wi))
							}
						}
					}
					yi := uint64(n*g.ys[0] + k*g.ys[1] + p*g.ys[2] + q*g.ys[3])
					v := alpha * sum
					if beta != 0 {
						v += beta * load(backend.DataR32F, Y, yi)
					}
					store(backend.DataR32F, Y, yi, v)
				}
			}
		}
	}
	return nil
}
