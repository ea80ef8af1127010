package worker

import (
	"errors"
	"fmt"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/wire"
)

// A striped copy moves StripeChunk pieces, piece i on lane i mod lanes, through a ring of two
// pinned slots per lane: while the device copies piece i, the lanes fill (or drain) the next ones
// in parallel. Every piece travels even after an error, so the lanes stay in step; the copy's
// result comes back as Status on the session's connection. A lane that fails ends the session.

// stripeSetup returns the lanes and the staging ring of a striped copy. With no usable device or
// staging, the data still has to move: it goes through Go memory and the copy reports err.
func (s *Session) stripeSetup(n uint32) ([]*lane, backend.Context, *ring, error, error) {
	ls, err := s.lanes.use(n)
	if err != nil && s.restored && !s.lanes.opened() {
		return nil, nil, nil, nil, errStripeRetry // sent to the old server; the lanes went with it
	}
	if err != nil {
		return nil, nil, nil, nil, err // a protocol error: the lanes carry data we cannot place
	}
	slots := 2 * len(ls)
	d, derr := s.dev()
	if derr == nil && (d.stripe == nil || len(d.stripe.slots) < slots) {
		if d.stripe != nil {
			d.stripe.free()
			d.stripe = nil
		}
		d.stripe, derr = newRingOf(d.ctx, slots, wire.StripeChunk)
	}
	if derr != nil {
		r := &ring{}
		for range slots {
			r.slots = append(r.slots, slot{buf: make([]byte, wire.StripeChunk)})
		}
		return ls, nil, r, derr, nil
	}
	return ls, d.ctx, d.stripe, nil, nil
}

// doneChans are the slots' completion channels: a slot has one lane job at a time.
func doneChans(n int) []chan error {
	done := make([]chan error, n)
	for i := range done {
		done[i] = make(chan error, 1)
	}
	return done
}

func pieces(bytes uint64) int { return int((bytes + wire.StripeChunk - 1) / wire.StripeChunk) }

func pieceLen(bytes uint64, i int) int {
	return int(min(bytes-uint64(i)*wire.StripeChunk, wire.StripeChunk))
}

// settle waits for a slot's last device copy; the first failure is kept in *err.
func settle(c backend.Context, sl *slot, err *error) {
	if sl.pending {
		sl.pending = false
		if e := c.EventSynchronize(sl.event); e != nil && *err == nil {
			*err = e
		}
	}
}

// errStripeRetry: a striped copy reached a restored session that never had lanes (the guest
// sent it to the old server); the guest makes it again unstriped.
var errStripeRetry = errors.New("striped copy on a moved session")

// htodStriped receives the pieces from the lanes into the ring and copies each to the device.
func (s *Session) htodStriped(m *wire.MemcpyHtoDStriped) (wire.Message, error) {
	ls, c, r, cerr, err := s.stripeSetup(m.Lanes)
	if err == errStripeRetry {
		return &wire.Status{Result: wire.StripeRetry, Message: "the session moved; copy again unstriped"}, nil
	}
	if err != nil {
		return nil, err
	}
	s.Stats.moved(int(m.Bytes))
	stream := backend.Handle(m.Stream)
	n, slots := pieces(m.Bytes), len(r.slots)
	done := doneChans(slots)
	issue := func(i int) {
		sl := &r.slots[i%slots]
		settle(c, sl, &cerr)
		ls[i%len(ls)].jobs <- laneJob{buf: sl.buf[:pieceLen(m.Bytes, i)], read: true, done: done[i%slots]}
	}
	issued := 0
	for ; issued < min(slots, n); issued++ {
		issue(issued)
	}
	var ioErr error
	for i := 0; i < issued; i++ { // pieces complete in order; each frees its slot for a later one
		if err := <-done[i%slots]; err != nil && ioErr == nil {
			ioErr = err
			s.lanes.closeAll() // wakes the other lanes; their jobs fail at once
		}
		if ioErr == nil && cerr == nil {
			sl := &r.slots[i%slots]
			cerr = c.MemcpyHtoD(m.Dst+uint64(i)*wire.StripeChunk, sl.buf[:pieceLen(m.Bytes, i)], stream, true)
			if cerr == nil {
				cerr = r.busy(sl, stream)
			}
		}
		if issued < n && ioErr == nil {
			issue(issued)
			issued++
		}
	}
	if ioErr != nil {
		return nil, fmt.Errorf("striped MemcpyHtoD: %w", ioErr)
	}
	if cerr == nil && m.Async == 0 {
		cerr = c.StreamSynchronize(stream)
	}
	if m.Async == 0 {
		cerr = s.takePending(cerr)
	}
	return status(cerr), nil
}

// dtohStriped copies pieces from the device into the ring and sends each on its lane, piece i+1
// on its way to the ring while piece i is on the socket.
func (s *Session) dtohStriped(m *wire.MemcpyDtoHStriped) (wire.Message, error) {
	ls, c, r, cerr, err := s.stripeSetup(m.Lanes)
	if err == errStripeRetry {
		return &wire.Status{Result: wire.StripeRetry, Message: "the session moved; copy again unstriped"}, nil
	}
	if err != nil {
		return nil, err
	}
	if cerr == nil {
		cerr = s.takePending(nil) // an earlier async error fails this copy; its bytes still travel
	}
	s.Stats.moved(int(m.Bytes))
	stream := backend.Handle(m.Stream)
	n, slots := pieces(m.Bytes), len(r.slots)
	done := doneChans(slots)
	var ioErr error
	handed, waited := 0, 0
	wait := func() { // pieces leave in order on each lane; wait for the oldest
		if err := <-done[waited%slots]; err != nil && ioErr == nil {
			ioErr = err
			s.lanes.closeAll()
		}
		waited++
	}
	hand := func() {
		sl := &r.slots[handed%slots]
		settle(c, sl, &cerr)
		ls[handed%len(ls)].jobs <- laneJob{buf: sl.buf[:pieceLen(m.Bytes, handed)], done: done[handed%slots]}
		handed++
	}
	for i := 0; i < n && ioErr == nil; i++ {
		if i >= slots {
			wait() // piece i-slots has left: its slot is free
		}
		sl := &r.slots[i%slots]
		if cerr == nil && ioErr == nil {
			cerr = c.MemcpyDtoH(sl.buf[:pieceLen(m.Bytes, i)], m.Src+uint64(i)*wire.StripeChunk, stream, true)
			if cerr == nil {
				cerr = r.busy(sl, stream)
			}
		}
		if i > 0 && ioErr == nil {
			hand() // piece i-1, while piece i is on its way to the ring
		}
	}
	if handed < n && ioErr == nil {
		hand()
	}
	for waited < handed {
		wait()
	}
	if ioErr != nil {
		return nil, fmt.Errorf("striped MemcpyDtoH: %w", ioErr)
	}
	return status(cerr), nil
}
