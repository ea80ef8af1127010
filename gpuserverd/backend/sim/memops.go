package sim

import (
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"gpucloud/gpuserverd/backend"
)

var _ backend.StreamMemOps = (*Context)(nil)

// memOpTimeout bounds a simulated wait: a GPU would wait for ever, a test double must not hang
// its test (the stream's work then fails with CUDA_ERROR_LAUNCH_FAILED).
const memOpTimeout = 30 * time.Second

// waitMet is a wait's condition (CUstreamWaitValue_flags' low bits) on a word of size bytes.
func waitMet(cond uint32, size uint64, have, want uint64) bool {
	switch cond {
	case 0: // GEQ, comparing as the driver does, wrapping: (int)(have - want) >= 0
		if size == 4 {
			return int32(uint32(have)-uint32(want)) >= 0
		}
		return int64(have-want) >= 0
	case 1: // EQ
		return have == want
	case 2: // AND
		return have&want != 0
	}
	return ^(have|want)&(1<<(8*size)-1) != 0 // NOR
}

// StreamMemOp runs a wait or a write on the stream, in order with its other work. Words are read
// and written atomically: another stream's goroutine may write them meanwhile.
func (c *Context) StreamMemOp(h backend.Handle, op uint32, addr, value uint64, flags uint32) error {
	size := uint64(4)
	if op == backend.MemOpWait64 || op == backend.MemOpWrite64 {
		size = 8
	}
	if op < backend.MemOpWait32 || op > backend.MemOpWrite64 || addr%size != 0 {
		return fmt.Errorf("stream memory op %d at %#x (aligned to %d): %w", op, addr, size, backend.ErrInvalidValue)
	}
	b, err := c.mem.view(addr, size)
	if err != nil {
		return err
	}
	p := unsafe.Pointer(unsafe.SliceData(b))
	load := func() uint64 {
		if size == 4 {
			return uint64(atomic.LoadUint32((*uint32)(p)))
		}
		return atomic.LoadUint64((*uint64)(p))
	}
	cond := flags & 3
	switch op {
	case backend.MemOpWait32, backend.MemOpWait64:
		if size == 4 {
			value &= 0xffffffff
		}
		return c.runKind(uncapturable, h, true, func() error {
			for deadline := time.Now().Add(memOpTimeout); !waitMet(cond, size, load(), value); time.Sleep(50 * time.Microsecond) {
				if time.Now().After(deadline) {
					return fmt.Errorf("stream wait on %#x for %d never met: %w", addr, value, backend.ErrLaunchFailed)
				}
			}
			return nil
		})
	}
	return c.runKind(uncapturable, h, true, func() error {
		if size == 4 {
			atomic.StoreUint32((*uint32)(p), uint32(value))
		} else {
			atomic.StoreUint64((*uint64)(p), value)
		}
		return nil
	})
}
