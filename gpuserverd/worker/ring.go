package worker

import (
	"fmt"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/wire"
)

// ring is the pinned staging buffers bulk copies go through: while the device copies chunk n
// out of one slot, the socket fills the next, so network and DMA overlap.
type ring struct {
	ctx   backend.Context
	slots []slot
	next  int
}

type slot struct {
	buf     []byte
	event   backend.Handle
	pending bool // a copy from or to buf may still run until event completes
}

const ringSlots = 4

func newRing(c backend.Context) (*ring, error) { return newRingOf(c, ringSlots, wire.MaxChunk+64) }

// newRingOf allocates n pinned slots of size bytes each.
func newRingOf(c backend.Context, n, size int) (*ring, error) {
	r := &ring{ctx: c}
	for range n {
		buf, err := c.HostAlloc(size)
		if err != nil {
			r.free()
			return nil, fmt.Errorf("staging buffer: %w", err)
		}
		ev, err := c.EventCreate(0x2) // CU_EVENT_DISABLE_TIMING
		if err != nil {
			r.free()
			return nil, fmt.Errorf("staging event: %w", err)
		}
		r.slots = append(r.slots, slot{buf: buf, event: ev})
	}
	return r, nil
}

// take returns the next slot once the device is done with it.
func (r *ring) take() (*slot, error) {
	sl := &r.slots[r.next]
	r.next = (r.next + 1) % len(r.slots)
	if sl.pending {
		sl.pending = false
		if err := r.ctx.EventSynchronize(sl.event); err != nil {
			return nil, err
		}
	}
	return sl, nil
}

// busy marks the slot in use by work just queued on stream.
func (r *ring) busy(sl *slot, stream backend.Handle) error {
	if err := r.ctx.EventRecord(sl.event, stream); err != nil {
		return err
	}
	sl.pending = true
	return nil
}

func (r *ring) free() {
	if r.ctx == nil {
		return // scratch: Go memory
	}
	for _, sl := range r.slots {
		_ = r.ctx.HostFree(sl.buf)
	}
}
