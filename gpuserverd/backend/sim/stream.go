package sim

import (
	"sync"
	"sync/atomic"
	"time"

	"gpucloud/gpuserverd/backend"
)

// stream runs its work in order on its own goroutine, as a GPU stream runs on the device.
type stream struct {
	blocking bool                       // synchronises with the legacy default stream
	window   backend.AccessPolicyWindow // its access-policy window (no cache here to keep it in)
	work     chan func()
	pending  atomic.Int64
	closed   sync.Once
	exited   chan struct{}
}

func newStream() *stream {
	s := &stream{work: make(chan func(), 1024), exited: make(chan struct{})}
	go func() {
		defer close(s.exited)
		for fn := range s.work {
			fn()
			s.pending.Add(-1)
		}
	}()
	return s
}

func (s *stream) enqueue(fn func()) {
	s.pending.Add(1)
	s.work <- fn
}

// marker returns a channel closed once everything enqueued so far has run.
func (s *stream) marker() chan struct{} {
	done := make(chan struct{})
	s.enqueue(func() { close(done) })
	return done
}

// sync waits until everything enqueued so far has run.
func (s *stream) sync() { <-s.marker() }

func (s *stream) idle() bool { return s.pending.Load() == 0 }

// stop lets queued work finish and ends the goroutine.
func (s *stream) stop() {
	s.closed.Do(func() { close(s.work) })
	<-s.exited
}

// record is one cuEventRecord: done closes when the stream reaches it.
type record struct {
	done chan struct{}
	at   time.Time
}

type event struct {
	noTiming bool // CU_EVENT_DISABLE_TIMING: cannot be timed
	mu       sync.Mutex
	last     *record // nil until first recorded
	// shared: an interprocess event's state, which other processes see (ipc.go); nil otherwise.
	shared *sharedEvent
}

func (e *event) current() *record {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.last
}

func (r *record) complete() bool {
	if r == nil {
		return true
	}
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}
