package sim

import (
	"encoding/binary"
	"math"

	"gpucloud/gpuserverd/backend"
)

// The simulated NPP (a test double of NVIDIA's): a few image functions computed on the CPU over the
// context's simulated device memory, queued on the stream their NppStreamContext names (so a
// context naming another session's or a made-up stream is refused as NVIDIA's would fail), and two
// host-side queries. Their arithmetic is this double's (NPP's rounding is documented loosely): the
// C tests check what it computes, the GPU run checks NVIDIA's. Every other NPP function answers
// NPP_NOT_SUPPORTED_MODE_ERROR, saying the simulated backend does not compute it.
var nppCalls = map[string]func(*libCall) ([]uint64, error){
	"nppiSet_8u_C1R_Ctx":                       nppSet8u,
	"nppiAdd_8u_C1RSfs_Ctx":                    nppAdd8uSfs,
	"nppiFilterBox_8u_C1R_Ctx":                 nppFilterBox8u,
	"nppiSegmentWatershedGetBufferSize_8u_C1R": nppWatershedBufferSize,
	"nppiEvenLevelsHost_32s":                   nppEvenLevels,
}

// NPP's statuses the double answers (nppdefs.h).
const (
	nppSizeError = -6 // NPP_SIZE_ERROR
	nppStepError = -14
)

// nppSize reads parameter i, an NppiSize by value (width, height).
func (l *libCall) nppSize(i int) (w, h int64) {
	b := l.Host[i]
	return int64(int32(binary.LittleEndian.Uint32(b))), int64(int32(binary.LittleEndian.Uint32(b[4:])))
}

// nppStream is the stream handle of parameter i, an NppStreamContext by value.
func (l *libCall) nppStream(i int) backend.Handle {
	return backend.Handle(binary.LittleEndian.Uint64(l.Host[i]))
}

// nppImage is the device memory of an 8-bit image of w x h pixels, rows step bytes apart.
func (l *libCall) nppImage(ptr uint64, step, w, h int64) ([]byte, error) {
	if step < w {
		return nil, backend.LibStatus(l.Func, nppStepError, "a step of %d for %d pixels", step, w)
	}
	return l.c.mem.view(ptr, uint64((h-1)*step+w))
}

// nppROI checks a region of interest: NPP refuses a negative one and does nothing for an empty one.
func (l *libCall) nppROI(i int) (w, h int64, err error) {
	w, h = l.nppSize(i)
	if w < 0 || h < 0 || w*h > MaxLibWork {
		return 0, 0, backend.LibStatus(l.Func, nppSizeError, "a region of %dx%d", w, h)
	}
	return w, h, nil
}

// nppSet8u: nValue, pDst, nDstStep, oSizeROI, ctx.
func nppSet8u(l *libCall) ([]uint64, error) {
	w, h, err := l.nppROI(3)
	if err != nil || w == 0 || h == 0 {
		return nil, err
	}
	v, step := byte(l.word(0)), int64(l.i32(2))
	dst, err := l.nppImage(l.word(1), step, w, h)
	if err != nil {
		return nil, err
	}
	return nil, l.launch(l.nppStream(4), func() error {
		for y := int64(0); y < h; y++ {
			for x := int64(0); x < w; x++ {
				dst[y*step+x] = v
			}
		}
		return nil
	})
}

// nppAdd8uSfs: pSrc1, nSrc1Step, pSrc2, nSrc2Step, pDst, nDstStep, oSizeROI, nScaleFactor, ctx:
// (a + b) * 2^-scale, rounded half to even, saturated to 0-255.
func nppAdd8uSfs(l *libCall) ([]uint64, error) {
	w, h, err := l.nppROI(6)
	if err != nil || w == 0 || h == 0 {
		return nil, err
	}
	s1, s2, sd, scale := int64(l.i32(1)), int64(l.i32(3)), int64(l.i32(5)), int(l.i32(7))
	a, err := l.nppImage(l.word(0), s1, w, h)
	if err != nil {
		return nil, err
	}
	b, err := l.nppImage(l.word(2), s2, w, h)
	if err != nil {
		return nil, err
	}
	dst, err := l.nppImage(l.word(4), sd, w, h)
	if err != nil {
		return nil, err
	}
	return nil, l.launch(l.nppStream(8), func() error {
		for y := int64(0); y < h; y++ {
			for x := int64(0); x < w; x++ {
				v := math.RoundToEven(math.Ldexp(float64(a[y*s1+x])+float64(b[y*s2+x]), -scale))
				dst[y*sd+x] = byte(min(max(v, 0), 255))
			}
		}
		return nil
	})
}

// nppFilterBox8u: pSrc, nSrcStep, pDst, nDstStep, oSizeROI, oMaskSize, oAnchor, ctx: each pixel the
// mean of the mask's pixels around it (the mask's anchor on it), rounded half up; the source is
// read outside the region as NPP does (the caller leaves a border).
func nppFilterBox8u(l *libCall) ([]uint64, error) {
	w, h, err := l.nppROI(4)
	if err != nil || w == 0 || h == 0 {
		return nil, err
	}
	mw, mh := l.nppSize(5)
	ax, ay := l.nppSize(6) // NppiPoint: x, y
	if mw < 1 || mh < 1 || mw*mh*w*h > MaxLibWork {
		return nil, backend.LibStatus(l.Func, -33, "a mask of %dx%d", mw, mh) // NPP_MASK_SIZE_ERROR
	}
	if ax < 0 || ay < 0 || ax >= mw || ay >= mh {
		return nil, backend.LibStatus(l.Func, -34, "an anchor at %d,%d in a %dx%d mask", ax, ay, mw, mh) // NPP_ANCHOR_ERROR
	}
	ss, sd := int64(l.i32(1)), int64(l.i32(3))
	src0 := l.word(0) - uint64(ay*ss+ax) // the mask's first pixel for the region's first
	src, err := l.nppImage(src0, ss, w+mw-1, h+mh-1)
	if err != nil {
		return nil, err
	}
	dst, err := l.nppImage(l.word(2), sd, w, h)
	if err != nil {
		return nil, err
	}
	n := mw * mh
	return nil, l.launch(l.nppStream(7), func() error {
		for y := int64(0); y < h; y++ {
			for x := int64(0); x < w; x++ {
				sum := int64(0)
				for j := int64(0); j < mh; j++ {
					for i := int64(0); i < mw; i++ {
						sum += int64(src[(y+j)*ss+x+i])
					}
				}
				dst[y*sd+x] = byte((sum + n/2) / n)
			}
		}
		return nil
	})
}

// nppWatershedBufferSize: oSizeROI, hpDeviceMemoryBufferSize: the double asks 8 bytes a pixel.
func nppWatershedBufferSize(l *libCall) ([]uint64, error) {
	w, h, err := l.nppROI(0)
	if err != nil {
		return nil, err
	}
	return []uint64{uint64(8 * w * h)}, nil
}

// nppEvenLevels: hpLevels (staged), nLevels, nLowerLevel, nUpperLevel: nLevels levels from lower
// to upper, evenly spaced (integer steps).
func nppEvenLevels(l *libCall) ([]uint64, error) {
	n, lo, hi := int64(l.i32(1)), int64(l.i32(2)), int64(l.i32(3))
	levels := l.Host[0]
	if n < 2 || int64(len(levels)) != 4*n {
		return nil, backend.LibStatus(l.Func, -107, "%d levels", n) // NPP_HISTOGRAM_NUMBER_OF_LEVELS_ERROR
	}
	for i := int64(0); i < n; i++ {
		binary.LittleEndian.PutUint32(levels[4*i:], uint32(int32(lo+i*(hi-lo)/(n-1))))
	}
	return nil, nil
}
