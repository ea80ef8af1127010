package sim

import (
	"fmt"
	"math/bits"

	"gpucloud/gpuserverd/backend"
)

// array is a CUDA array: its elements stored row after row, slice after slice (the real layout
// is opaque, so any layout serves).
type array struct {
	desc backend.ArrayDesc
	data []byte
}

// maxArrayDim bounds each dimension (an H100's 3-D texture limit).
const maxArrayDim = 16384

// maxCopyRows bounds the rows of one simulated 3-D copy, which the simulator lists before copying
// (a tenant's box of a billion one-byte rows must not exhaust the worker).
const maxCopyRows = 1 << 22

func (a *array) rowBytes() uint64 {
	return a.desc.Width * backend.ElementBytes(a.desc.Format, a.desc.Channels)
}

func (c *Context) ArrayCreate(d backend.ArrayDesc) (backend.Handle, error) {
	n := d.Bytes()
	if n == 0 || d.Width > maxArrayDim || d.Height > maxArrayDim || d.Depth > maxArrayDim {
		return 0, fmt.Errorf("array %dx%dx%d of format %#x, %d channels: %w", d.Width, d.Height, d.Depth, d.Format, d.Channels, backend.ErrInvalidValue)
	}
	if err := c.b.reserve(c.ordinal, n); err != nil {
		return 0, fmt.Errorf("array of %d bytes: %w", n, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fam.arrays == nil {
		c.fam.arrays = map[backend.Handle]*array{}
	}
	h := c.handle()
	c.fam.arrays[h] = &array{desc: d, data: make([]byte, n)}
	return h, nil
}

func (c *Context) ArrayDestroy(h backend.Handle) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, ok := c.fam.arrays[h]
	if !ok {
		return fmt.Errorf("destroy of array %d: %w", h, backend.ErrInvalidHandle)
	}
	delete(c.fam.arrays, h)
	c.b.release(c.ordinal, uint64(len(a.data)))
	return nil
}

func (c *Context) ArrayDescriptor(h backend.Handle) (backend.ArrayDesc, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, ok := c.fam.arrays[h]
	if !ok {
		return backend.ArrayDesc{}, fmt.Errorf("array %d: %w", h, backend.ErrInvalidHandle)
	}
	return a.desc, nil
}

// rows returns the width-byte rows of a box on one side of a copy, slice by slice.
func (c *Context) rows(s backend.CopySide, host []byte, w, h, d uint64) ([][]byte, error) {
	if h == 0 || d == 0 || w == 0 {
		return nil, nil
	}
	if hi, _ := bits.Mul64(w*h, d); hi != 0 || w*h/h != w || h > maxCopyRows || d > maxCopyRows || h*d > maxCopyRows {
		return nil, fmt.Errorf("copy box %dx%dx%d (at most %d rows): %w", w, h, d, maxCopyRows, backend.ErrInvalidValue)
	}
	out := make([][]byte, 0, h*d)
	switch s.Kind {
	case backend.SideHost:
		if uint64(len(host)) != w*h*d {
			return nil, fmt.Errorf("copy of a %dx%dx%d box with %d host bytes: %w", w, h, d, len(host), backend.ErrInvalidValue)
		}
		for i := uint64(0); i < h*d; i++ {
			out = append(out, host[i*w:(i+1)*w])
		}
	case backend.SideDevice:
		pitch := s.Pitch
		if pitch == 0 && h == 1 && d == 1 {
			pitch = w
		}
		if pitch < s.X+w || (d > 1 && s.Height < s.Y+h) {
			return nil, fmt.Errorf("copy of %d bytes at x %d from rows of pitch %d (height %d): %w", w, s.X, pitch, s.Height, backend.ErrInvalidValue)
		}
		for z := range d {
			for y := range h {
				addr := s.Ptr + ((s.Z+z)*s.Height+s.Y+y)*pitch + s.X
				row, err := c.mem.view(addr, w)
				if err != nil {
					return nil, err
				}
				out = append(out, row)
			}
		}
	case backend.SideArray:
		c.mu.Lock()
		a, ok := c.fam.arrays[backend.Handle(s.Ptr)]
		c.mu.Unlock()
		if !ok {
			return nil, fmt.Errorf("copy with array %d: %w", s.Ptr, backend.ErrInvalidHandle)
		}
		rb, ah, ad := a.rowBytes(), max(a.desc.Height, 1), max(a.desc.Depth, 1)
		if s.X > rb || w > rb-s.X || s.Y > ah || h > ah-s.Y || s.Z > ad || d > ad-s.Z {
			return nil, fmt.Errorf("copy box %dx%dx%d at (%d, %d, %d) outside array %d (%d bytes x %d x %d): %w",
				w, h, d, s.X, s.Y, s.Z, s.Ptr, rb, ah, ad, backend.ErrInvalidValue)
		}
		for z := range d {
			for y := range h {
				off := ((s.Z+z)*ah+s.Y+y)*rb + s.X
				out = append(out, a.data[off:off+w])
			}
		}
	default:
		return nil, fmt.Errorf("copy side of kind %d: %w", s.Kind, backend.ErrInvalidValue)
	}
	return out, nil
}

func (c *Context) Memcpy3D(cp backend.Copy3D) error {
	fn, err := c.copyWork(cp)
	if err != nil {
		return err
	}
	async := cp.Async && cp.Src.Kind != backend.SideHost && cp.Dst.Kind != backend.SideHost
	if cp.Src.Kind == backend.SideHost && cp.Async {
		// The worker reuses the frame's buffer: keep a copy for the stream.
		held := append([]byte(nil), cp.Host...)
		cp.Host, async = held, true
		if fn, err = c.copyWork(cp); err != nil {
			return err
		}
	}
	return c.runKind(nodeMemcpy, cp.Stream, async, fn)
}

// copyWork checks a 3-D copy and returns the work that does it.
func (c *Context) copyWork(cp backend.Copy3D) (func() error, error) {
	src, err := c.rows(cp.Src, cp.Host, cp.Width, cp.Height, cp.Depth)
	if err != nil {
		return nil, err
	}
	dst, err := c.rows(cp.Dst, cp.Host, cp.Width, cp.Height, cp.Depth)
	if err != nil {
		return nil, err
	}
	return func() error {
		for i := range src {
			copy(dst[i], src[i])
		}
		return nil
	}, nil
}
