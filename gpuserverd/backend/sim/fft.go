package sim

import (
	"encoding/binary"
	"math"
	"math/cmplx"

	"gpucloud/gpuserverd/backend"
)

// cuFFT's transform types (cufftType).
const (
	fftR2C = 0x2a
	fftC2R = 0x2c
	fftC2C = 0x29
	fftD2Z = 0x6a
	fftZ2D = 0x6c
	fftZ2Z = 0x69
)

// fftPlan is a simulated cuFFT plan: a naive DFT per dimension (a test double of NVIDIA's cuFFT).
type fftPlan struct {
	made             bool
	typ              int
	n, inembed, oemb []int64
	istride, idist   int64
	ostride, odist   int64
	batch            int64
	stream           backend.Handle
	// work is the work area the simulated plan asks for (one double complex per element, as if it
	// had scratch space: so the worker's quota path runs in CI); area is the one it was given.
	work, area uint64
}

func (p *fftPlan) double() bool { return p.typ == fftD2Z || p.typ == fftZ2D || p.typ == fftZ2Z }

// logical is the dims of the plan's input or output side: complex halves the last dimension of a
// real-to-complex output or a complex-to-real input.
func (p *fftPlan) dims(input bool) []int64 {
	d := append([]int64(nil), p.n...)
	if (input && (p.typ == fftC2R || p.typ == fftZ2D)) || (!input && (p.typ == fftR2C || p.typ == fftD2Z)) {
		d[len(d)-1] = d[len(d)-1]/2 + 1
	}
	return d
}

func (p *fftPlan) complexIn() bool  { return p.typ != fftR2C && p.typ != fftD2Z }
func (p *fftPlan) complexOut() bool { return p.typ != fftC2R && p.typ != fftZ2D }

var fftCalls = map[string]func(*libCall) ([]uint64, error){
	"cufftCreate": func(l *libCall) ([]uint64, error) { return []uint64{l.c.newLibObj(&fftPlan{})}, nil },
	"cufftDestroy": func(l *libCall) ([]uint64, error) {
		if _, err := libObject[*fftPlan](l, 0); err != nil {
			return nil, err
		}
		l.c.dropLibObj(l.word(0))
		return nil, nil
	},
	"cufftSetStream":         libSetStream(func(o *fftPlan) *backend.Handle { return &o.stream }),
	"cufftSetAutoAllocation": fftNoWork,
	"cufftSetWorkArea": func(l *libCall) ([]uint64, error) {
		p, err := libObject[*fftPlan](l, 0)
		if err != nil {
			return nil, err
		}
		p.area = l.word(1)
		return nil, nil
	},
	"cufftGetSize": func(l *libCall) ([]uint64, error) {
		p, err := libObject[*fftPlan](l, 0)
		if err != nil {
			return nil, err
		}
		return []uint64{p.work}, nil
	},
	// plan, rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch, workSize
	"cufftMakePlanMany64": func(l *libCall) ([]uint64, error) {
		return fftMake(l, int(l.i32(9)), [2]int{4, 5}, [2]int{7, 8}, 6, 10)
	},
	// plan, rank, n, inembed, istride, idist, inputtype, onembed, ostride, odist, outputtype, batch, workSize, executiontype
	"cufftXtMakePlanMany": func(l *libCall) ([]uint64, error) {
		types := map[[2]uint64]int{{4, 4}: fftC2C, {0, 4}: fftR2C, {4, 0}: fftC2R, {5, 5}: fftZ2Z, {1, 5}: fftD2Z, {5, 1}: fftZ2D}
		typ, ok := types[[2]uint64{l.word(6), l.word(10)}]
		if !ok {
			return nil, backend.LibNotSupported(l.Func, "the simulated backend computes 32- and 64-bit float transforms only (types %d -> %d)", l.word(6), l.word(10))
		}
		return fftMake(l, typ, [2]int{4, 5}, [2]int{8, 9}, 7, 11)
	},
	"cufftExecC2C": func(l *libCall) ([]uint64, error) { return fftExec(l, fftC2C, l.i32(3)) },
	"cufftExecZ2Z": func(l *libCall) ([]uint64, error) { return fftExec(l, fftZ2Z, l.i32(3)) },
	"cufftExecR2C": func(l *libCall) ([]uint64, error) { return fftExec(l, fftR2C, -1) },
	"cufftExecD2Z": func(l *libCall) ([]uint64, error) { return fftExec(l, fftD2Z, -1) },
	"cufftExecC2R": func(l *libCall) ([]uint64, error) { return fftExec(l, fftC2R, 1) },
	"cufftExecZ2D": func(l *libCall) ([]uint64, error) { return fftExec(l, fftZ2D, 1) },
	"cufftXtExec":  func(l *libCall) ([]uint64, error) { return fftExec(l, 0, l.i32(3)) },
}

func fftNoWork(l *libCall) ([]uint64, error) {
	_, err := libObject[*fftPlan](l, 0)
	return nil, err
}

// fftMake plans a transform: parameters 2 (n) and 3 (inembed) and onembed at oemb are host
// arrays of rank int64s; in and out the stride and distance parameters.
func fftMake(l *libCall, typ int, in, out [2]int, oemb, batch int) ([]uint64, error) {
	p, err := libObject[*fftPlan](l, 0)
	if err != nil {
		return nil, err
	}
	rank := l.int(1)
	if rank < 1 || rank > 3 || len(l.Host[2]) != int(rank)*8 {
		return nil, l.invalid("rank %d", rank)
	}
	np := &fftPlan{typ: typ, batch: l.int(batch), stream: p.stream}
	ints := func(b []byte) []int64 {
		var v []int64
		for i := 0; i+8 <= len(b); i += 8 {
			v = append(v, int64(binary.LittleEndian.Uint64(b[i:])))
		}
		return v
	}
	np.n = ints(l.Host[2])
	work := np.batch
	for _, d := range np.n {
		if d < 1 {
			return nil, backend.LibStatus(l.Func, 8, "dimension %d", d) // CUFFT_INVALID_SIZE
		}
		work *= d * d
	}
	if np.batch < 1 || work > MaxLibWork {
		return nil, backend.LibNotSupported(l.Func, "batch %d of %v: the simulated backend computes at most %d multiply-adds", np.batch, np.n, MaxLibWork)
	}
	if len(l.Host[3]) == 0 || len(l.Host[oemb]) == 0 { // the basic layout
		np.inembed, np.oemb = np.dims(true), np.dims(false)
		np.istride, np.idist, np.ostride, np.odist = 1, prod(np.inembed), 1, prod(np.oemb)
	} else {
		np.inembed, np.oemb = ints(l.Host[3]), ints(l.Host[oemb])
		np.istride, np.idist, np.ostride, np.odist = l.int(in[0]), l.int(in[1]), l.int(out[0]), l.int(out[1])
		// The advanced layout's elements must lie where its last one does, after its first: every
		// embedding at least the dimension it holds, strides and distances positive.
		in, out := np.dims(true), np.dims(false)
		for i := range in {
			if np.inembed[i] < in[i] || np.oemb[i] < out[i] {
				return nil, l.invalid("embedding %d: %d in, %d out for %d, %d", i, np.inembed[i], np.oemb[i], in[i], out[i])
			}
		}
		if np.istride < 1 || np.ostride < 1 || np.idist < 0 || np.odist < 0 {
			return nil, l.invalid("strides %d, %d and distances %d, %d", np.istride, np.ostride, np.idist, np.odist)
		}
		extent := func(emb []int64, stride, dist int64) float64 { // in float64: no overflow to hide it
			e := float64(stride) + float64(np.batch)*float64(dist)
			for _, d := range emb {
				e *= float64(d)
			}
			return e
		}
		if extent(np.inembed, np.istride, np.idist) > 1<<40 || extent(np.oemb, np.ostride, np.odist) > 1<<40 {
			return nil, l.invalid("a layout past 2^40 elements")
		}
	}
	np.made = true
	np.work = uint64(prod(np.n)*np.batch) * 16
	*p = *np
	return []uint64{np.work}, nil
}

func prod(d []int64) int64 {
	n := int64(1)
	for _, v := range d {
		n *= v
	}
	return n
}

// fftExec queues the transform of plan (parameter 0) from parameter 1 to parameter 2; want is
// the plan type the exec function is for (0: any, cufftXtExec).
func fftExec(l *libCall, want int, dir int32) ([]uint64, error) {
	p, err := libObject[*fftPlan](l, 0)
	if err != nil {
		return nil, err
	}
	if !p.made {
		return nil, backend.LibBadObject(l.Func, "the plan was not made")
	}
	if p.area == 0 { // NVIDIA's cuFFT, auto-allocation off, fails such an execution too
		return nil, l.invalid("the plan has no work area (auto-allocation off and none set)")
	}
	if _, err := l.c.mem.view(p.area, p.work); err != nil {
		return nil, l.invalid("the plan's work area: %v", err)
	}
	if want != 0 && want != p.typ {
		return nil, backend.LibStatus(l.Func, 3, "plan type %#x, %s is for %#x", p.typ, l.Func.Name, want) // CUFFT_INVALID_TYPE
	}
	if p.complexIn() && p.complexOut() && dir != -1 && dir != 1 {
		return nil, l.invalid("direction %d", dir)
	}
	if !p.complexIn() {
		dir = -1
	} else if !p.complexOut() {
		dir = 1
	}
	plan, src, dst := *p, l.word(1), l.word(2)
	return nil, l.launch(p.stream, func() error { return l.c.fft(&plan, src, dst, float64(dir)) })
}

// offset is the element index of multi-index idx in an embedding.
func offset(idx, emb []int64, stride int64) int64 {
	o := int64(0)
	for i := range idx {
		o = o*emb[i] + idx[i]
	}
	return o * stride
}

// each calls fn with every multi-index of dims.
func each(dims []int64, fn func([]int64)) {
	idx := make([]int64, len(dims))
	for {
		fn(idx)
		i := len(dims) - 1
		for ; i >= 0; i-- {
			idx[i]++
			if idx[i] < dims[i] {
				break
			}
			idx[i] = 0
		}
		if i < 0 {
			return
		}
	}
}

func (c *Context) fft(p *fftPlan, src, dst uint64, sign float64) error {
	esz := int64(4)
	if p.double() {
		esz = 8
	}
	isz, osz := esz, esz
	if p.complexIn() {
		isz *= 2
	}
	if p.complexOut() {
		osz *= 2
	}
	inDims, outDims := p.dims(true), p.dims(false)
	span := func(dims, emb []int64, stride, dist int64) int64 {
		last := make([]int64, len(dims))
		for i, d := range dims {
			last[i] = d - 1
		}
		return (p.batch-1)*dist + offset(last, emb, stride) + 1
	}
	in, err := c.viewElems(src, span(inDims, p.inembed, p.istride, p.idist), isz)
	if err != nil {
		return err
	}
	out, err := c.viewElems(dst, span(outDims, p.oemb, p.ostride, p.odist), osz)
	if err != nil {
		return err
	}
	rd := func(b []byte, i int64) float64 {
		if esz == 8 {
			return math.Float64frombits(binary.LittleEndian.Uint64(b[i*8:]))
		}
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b[i*4:])))
	}
	wr := func(b []byte, i int64, v float64) {
		if esz == 8 {
			binary.LittleEndian.PutUint64(b[i*8:], math.Float64bits(v))
		} else {
			binary.LittleEndian.PutUint32(b[i*4:], math.Float32bits(float32(v)))
		}
	}
	full := p.n
	for b := int64(0); b < p.batch; b++ {
		x := make([]complex128, prod(full))
		each(inDims, func(idx []int64) {
			e := b*p.idist + offset(idx, p.inembed, p.istride)
			v := complex(rd(in, e), 0)
			if p.complexIn() {
				v = complex(rd(in, 2*e), rd(in, 2*e+1))
			}
			x[offset(idx, full, 1)] = v
			if !p.complexOut() { // a half spectrum: the rest is its Hermitian mirror
				mirror := make([]int64, len(idx))
				for i := range idx {
					mirror[i] = (full[i] - idx[i]) % full[i]
				}
				x[offset(mirror, full, 1)] = cmplx.Conj(v)
			}
		})
		dft(x, full, sign)
		each(outDims, func(idx []int64) {
			e := b*p.odist + offset(idx, p.oemb, p.ostride)
			v := x[offset(idx, full, 1)]
			if p.complexOut() {
				wr(out, 2*e, real(v))
				wr(out, 2*e+1, imag(v))
			} else {
				wr(out, e, real(v))
			}
		})
	}
	return nil
}

// dft transforms x (row-major dims) in place along each dimension, unnormalised.
func dft(x []complex128, dims []int64, sign float64) {
	for ax := range dims {
		n := dims[ax]
		stride := prod(dims[ax+1:])
		tmp := make([]complex128, n)
		for base := int64(0); base < int64(len(x)); base++ {
			if (base/stride)%n != 0 { // visit each line once, from its first element
				continue
			}
			for k := int64(0); k < n; k++ {
				var s complex128
				for j := int64(0); j < n; j++ {
					s += x[base+j*stride] * cmplx.Rect(1, sign*2*math.Pi*float64(j*k%n)/float64(n))
				}
				tmp[k] = s
			}
			for k := int64(0); k < n; k++ {
				x[base+k*stride] = tmp[k]
			}
		}
	}
}
