package worker

import (
	"errors"
	"io"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"gpucloud/gpuserverd/wire"
)

// shmRing is one direction of a session's control channel once it has an arena: a byte stream
// in shared memory (layout in wire/spec/messages.spec, "shm_ctl"). A waiting side spins briefly,
// since the answer to a small call comes within microseconds, then sleeps on a futex the other
// side wakes: no system call on the fast path, where a socket costs two and a wake-up each way.
// One reader and one writer per ring.
type shmRing struct {
	head, tail   *uint32 // bytes written and read, modulo 2^32
	rwait, wwait *uint32 // a reader (writer) sleeps on head (tail)
	data         []byte
	alive        func() error // checked while sleeping: nil while the peer is there
	spin         time.Duration
	poll         bool // the polling doorbell (a VM's ivshmem region): nap, never futex
}

// ringSpin is how long a side waits actively before sleeping.
const ringSpin = 50 * time.Microsecond

// newShmRing is ring r of the arena mem.
func newShmRing(mem []byte, r int, alive func() error) *shmRing {
	h := r * 2048
	word := func(off int) *uint32 { return (*uint32)(unsafe.Pointer(&mem[h+off])) }
	return &shmRing{head: word(0), tail: word(64), rwait: word(128), wwait: word(192),
		data: mem[(r+1)*wire.ShmRing : (r+2)*wire.ShmRing], alive: alive, spin: ringSpin}
}

func (r *shmRing) Write(p []byte) (int, error) {
	size := uint32(len(r.data))
	n := 0
	for n < len(p) {
		head, tail := atomic.LoadUint32(r.head), atomic.LoadUint32(r.tail)
		free := size - (head - tail)
		if free == 0 {
			if err := r.wait(r.tail, tail, r.wwait); err != nil {
				return n, err
			}
			continue
		}
		c := min(int(free), len(p)-n)
		off := int(head % size)
		k := copy(r.data[off:], p[n:n+c])
		copy(r.data, p[n+k:n+c])
		atomic.StoreUint32(r.head, head+uint32(c))
		if !r.poll && atomic.LoadUint32(r.rwait) != 0 {
			futexWake(r.head)
		}
		n += c
	}
	return n, nil
}

func (r *shmRing) Read(p []byte) (int, error) {
	size := uint32(len(r.data))
	for {
		head, tail := atomic.LoadUint32(r.head), atomic.LoadUint32(r.tail)
		if head != tail {
			c := min(int(head-tail), len(p))
			off := int(tail % size)
			k := copy(p[:c], r.data[off:])
			copy(p[k:c], r.data)
			atomic.StoreUint32(r.tail, tail+uint32(c))
			if !r.poll && atomic.LoadUint32(r.wwait) != 0 {
				futexWake(r.tail)
			}
			return c, nil
		}
		if err := r.wait(r.head, head, r.rwait); err != nil {
			return 0, err
		}
	}
}

// wait returns once *word is no longer seen, or with the error alive reports.
func (r *shmRing) wait(word *uint32, seen uint32, sleeping *uint32) error {
	start := time.Now()
	for i := 0; ; i++ {
		if atomic.LoadUint32(word) != seen {
			return nil
		}
		if i&255 == 255 && time.Since(start) > r.spin {
			break
		}
	}
	if r.poll {
		return r.pollWait(word, seen)
	}
	atomic.StoreUint32(sleeping, 1) // then re-check: a writer stores first, then reads the flag
	defer atomic.StoreUint32(sleeping, 0)
	for atomic.LoadUint32(word) == seen {
		futexWait(word, seen, 100*time.Millisecond)
		if atomic.LoadUint32(word) != seen {
			break
		}
		if r.alive != nil {
			if err := r.alive(); err != nil {
				return err
			}
		}
	}
	return nil
}

// The futex operations on shared (not process-private) words.
const (
	futexWaitOp = 0
	futexWakeOp = 1
)

func futexWait(addr *uint32, val uint32, d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWaitOp, uintptr(val),
		uintptr(unsafe.Pointer(&ts)), 0, 0)
}

func futexWake(addr *uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWakeOp, 1, 0, 0, 0)
}

// peerAlive reports io.EOF once the socket's peer has closed it (the guest went away); the
// socket carries no frames once the rings are in use.
func peerAlive(fd int) func() error {
	return func() error {
		var b [1]byte
		n, _, err := unix.Recvfrom(fd, b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		switch {
		case n == 0 && err == nil:
			return io.EOF
		case err == nil || errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EINTR):
			return nil
		}
		return err
	}
}

// Polling doorbell: naps growing from pollNapMin to pollNapMax, and to pollNapIdle once the wait
// has lasted pollIdle (a guest idle between calls costs the worker at most 500 wake-ups a second,
// its next call at most 2 ms more); the liveness check every pollCheck. A nanosleep on the
// worker's locked thread, not time.Sleep: the runtime's timers would round a few microseconds up
// to far more. (guest/transport/ring.c naps the same way, after a longer spin: its thread is blocked in a
// CUDA call, while this one waits for the next call, which may be far off.)
const (
	pollNapMin  = 2 * time.Microsecond
	pollNapMax  = 200 * time.Microsecond
	pollIdle    = 100 * time.Millisecond
	pollNapIdle = 2 * time.Millisecond
	pollCheck   = 50 * time.Millisecond
)

func (r *shmRing) pollWait(word *uint32, seen uint32) error {
	nap := pollNapMin
	began := time.Now()
	last := began
	for atomic.LoadUint32(word) == seen {
		ts := unix.NsecToTimespec(int64(nap))
		unix.Nanosleep(&ts, nil)
		if atomic.LoadUint32(word) != seen {
			break
		}
		if time.Since(began) > pollIdle {
			nap = min(2*nap, pollNapIdle)
		} else {
			nap = min(2*nap, pollNapMax)
		}
		if time.Since(last) > pollCheck {
			last = time.Now()
			if r.alive != nil {
				if err := r.alive(); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// NewPollRing is ring r (0: the guest's frames, 1: the server's) of a VM's ivshmem region, with
// the polling doorbell; alive says, every so often while it waits, whether to go on.
func NewPollRing(mem []byte, r int, alive func() error) io.ReadWriter {
	ring := newShmRing(mem, r, alive)
	ring.poll = true
	return ring
}
