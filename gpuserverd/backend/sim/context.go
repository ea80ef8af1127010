package sim

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"time"
	"unsafe"

	"gpucloud/gpuserverd/backend"
)

// Context is one simulated CUDA context.
type Context struct {
	b       *Backend
	ordinal int
	mem     *memory

	mu        sync.Mutex
	nextH     backend.Handle
	streams   map[backend.Handle]*stream // 0: the default stream
	events    map[backend.Handle]*event
	modules   map[backend.Handle]*module
	functions map[backend.Handle]*kernel
	fnOrigin  map[backend.Handle]backend.Handle // function -> the module it came from
	asyncErr  error                             // sticky: the first error of work run asynchronously
	reg       map[*byte]int                     // registered host ranges, as the driver keeps them
	// hostMapped: registered ranges mapped into the device's addresses (hostmap.go) -> base.
	hostMapped map[*byte]uint64
	blas       map[backend.Handle]*blasHandle
	dnn        map[backend.Handle]*dnnHandle
	dnnDescs   map[backend.Handle]*dnnDesc
	libObjs    map[uint64]any // simulated cuSPARSE, cuFFT and cuRAND objects (libcall.go)

	// What the program set: cuFuncSetAttribute by function, cuCtxSetLimit, cuCtxSetCacheConfig.
	funcAttrs   map[backend.Handle]funcAttrs
	limits      map[int32]uint64
	cacheConfig int32

	fam families // the hand-written driver-API families (families.go)
}

func newContext(b *Backend, ordinal int) *Context {
	return &Context{
		b: b, ordinal: ordinal, mem: newMemory(ordinal), nextH: 1,
		streams: map[backend.Handle]*stream{0: newStream()},
		events:  map[backend.Handle]*event{}, modules: map[backend.Handle]*module{},
		functions: map[backend.Handle]*kernel{},
	}
}

func (c *Context) handle() backend.Handle {
	h := c.nextH
	c.nextH++
	return h
}

func (c *Context) stream(h backend.Handle) (*stream, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.streams[h]
	if !ok {
		return nil, fmt.Errorf("stream %d: %w", h, backend.ErrInvalidHandle)
	}
	return s, nil
}

func (c *Context) event(h backend.Handle) (*event, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.events[h]
	if !ok {
		return nil, fmt.Errorf("event %d: %w", h, backend.ErrInvalidHandle)
	}
	return e, nil
}

func (c *Context) fail(err error) {
	c.mu.Lock()
	if c.asyncErr == nil {
		c.asyncErr = err
	}
	c.mu.Unlock()
}

func (c *Context) stickyErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.asyncErr
}

// enqueue queues fn on stream h with the legacy default stream's ordering: work on stream 0
// waits for everything queued before it on blocking streams, and work on a blocking stream waits
// for what stream 0 had queued. Non-blocking streams order only against themselves.
func (c *Context) enqueue(h backend.Handle, s *stream, fn func()) {
	var waits []chan struct{}
	c.mu.Lock()
	if h == 0 {
		for hh, o := range c.streams {
			if hh != 0 && o.blocking {
				waits = append(waits, o.marker())
			}
		}
	} else if s.blocking {
		waits = append(waits, c.streams[0].marker())
	}
	c.mu.Unlock()
	s.enqueue(func() {
		for _, w := range waits {
			<-w
		}
		fn()
	})
}

// run enqueues fn on the stream; a synchronous call waits for it and returns its error. Work
// that a capture cannot hold (copies with the host) goes through run; other work through runKind.
func (c *Context) run(h backend.Handle, async bool, fn func() error) error {
	return c.runKind(uncapturable, h, async, fn)
}

// runKind is run for work of a graph node's kind, which a capturing stream records (graph.go).
func (c *Context) runKind(kind int, h backend.Handle, async bool, fn func() error) error {
	s, err := c.stream(h)
	if err != nil {
		return err
	}
	if captured, err := c.captured(kind, h, fn); captured {
		return err
	}
	if async {
		c.enqueue(h, s, func() {
			if err := fn(); err != nil {
				c.fail(err)
			}
		})
		return nil
	}
	var ferr error
	done := make(chan struct{})
	c.enqueue(h, s, func() { ferr = fn(); close(done) })
	<-done
	return ferr
}

func (c *Context) MemAlloc(bytes uint64) (uint64, error) {
	if c.globalCapture() {
		return 0, fmt.Errorf("allocate during a global-mode stream capture: %w", backend.ErrStreamCaptureUnsupported)
	}
	if err := c.b.reserve(c.ordinal, bytes); err != nil {
		return 0, fmt.Errorf("allocate %d bytes: %w", bytes, err)
	}
	return c.mem.add(bytes), nil
}

func (c *Context) MemFree(ptr uint64) error {
	if ok, err := c.freeGraphAlloc(ptr, 0, true); ok {
		return err
	}
	n, err := c.mem.remove(ptr)
	if err != nil {
		return err
	}
	c.b.release(c.ordinal, n)
	return nil
}

func (c *Context) MemGetInfo() (uint64, uint64, error) {
	return c.b.free(c.ordinal), c.b.devices[c.ordinal].TotalMemory, nil
}

func (c *Context) HostAlloc(bytes int) ([]byte, error) { return make([]byte, bytes), nil }
func (c *Context) HostFree([]byte) error               { return nil }

// HostRegister keeps the range as the driver does: a range overlapping one already registered is
// refused, so a worker registering its arena twice fails here as it would on a GPU.
func (c *Context) HostRegister(buf []byte) error {
	if len(buf) == 0 {
		return fmt.Errorf("sim: register of an empty host range: %w", backend.ErrInvalidValue)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	for p, n := range c.reg {
		q := uintptr(unsafe.Pointer(p))
		if lo < q+uintptr(n) && q < lo+uintptr(len(buf)) {
			return fmt.Errorf("sim: host range %#x+%d overlaps a registered one: %w", lo, len(buf), backend.ErrHostAlreadyRegistered)
		}
	}
	if c.reg == nil {
		c.reg = map[*byte]int{}
	}
	c.reg[unsafe.SliceData(buf)] = len(buf)
	return nil
}

func (c *Context) HostUnregister(buf []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.reg[unsafe.SliceData(buf)]; !ok || len(buf) == 0 {
		return fmt.Errorf("sim: host range %p was not registered: %w", unsafe.SliceData(buf), backend.ErrHostNotRegistered)
	}
	delete(c.reg, unsafe.SliceData(buf))
	if base, ok := c.hostMapped[unsafe.SliceData(buf)]; ok {
		delete(c.hostMapped, unsafe.SliceData(buf))
		c.mem.drop(base)
	}
	return nil
}

// Registered is the number of host ranges registered now (tests).
func (c *Context) Registered() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.reg)
}

func (c *Context) MemcpyHtoD(dst uint64, src []byte, h backend.Handle, async bool) error {
	d, err := c.mem.view(dst, uint64(len(src)))
	if err != nil {
		return err
	}
	return c.run(h, async, func() error { copy(d, src); return nil })
}

func (c *Context) MemcpyDtoH(dst []byte, src uint64, h backend.Handle, async bool) error {
	s, err := c.mem.view(src, uint64(len(dst)))
	if err != nil {
		return err
	}
	return c.run(h, async, func() error { copy(dst, s); return nil })
}

func (c *Context) MemcpyDtoD(dst, src, n uint64, h backend.Handle, async bool) error {
	d, err := c.mem.view(dst, n)
	if err != nil {
		return err
	}
	s, err := c.mem.view(src, n)
	if err != nil {
		return err
	}
	return c.runKind(nodeMemcpy, h, async, func() error { copy(d, s); return nil })
}

func (c *Context) Memset(dst uint64, value uint32, elemSize int, count uint64, h backend.Handle, async bool) error {
	if elemSize != 1 && elemSize != 2 && elemSize != 4 {
		return fmt.Errorf("memset element size %d: %w", elemSize, backend.ErrInvalidValue)
	}
	if count > math.MaxUint64/4 {
		return fmt.Errorf("memset of %d elements: %w", count, backend.ErrInvalidValue)
	}
	fn, err := c.deferredWork(func() (func() error, error) {
		d, err := c.mem.view(dst, count*uint64(elemSize))
		return func() error {
			var pat [4]byte
			binary.LittleEndian.PutUint32(pat[:], value)
			for i := 0; i < len(d); i += elemSize {
				copy(d[i:i+elemSize], pat[:elemSize])
			}
			return nil
		}, err
	}, dst)
	if err != nil {
		return err
	}
	return c.runKind(nodeMemset, h, async, fn)
}

func (c *Context) StreamCreate(flags uint32) (backend.Handle, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.handle()
	c.streams[h] = newStream()
	c.streams[h].blocking = flags&1 == 0 // CU_STREAM_NON_BLOCKING
	return h, nil
}

func (c *Context) StreamDestroy(h backend.Handle) error {
	c.mu.Lock()
	s, ok := c.streams[h]
	if ok && h != 0 {
		delete(c.streams, h)
	}
	c.mu.Unlock()
	if !ok || h == 0 {
		return fmt.Errorf("destroy stream %d: %w", h, backend.ErrInvalidHandle)
	}
	s.stop() // CUDA lets pending work finish
	return nil
}

func (c *Context) StreamSynchronize(h backend.Handle) error {
	s, err := c.stream(h)
	if err != nil {
		return err
	}
	s.sync()
	return c.stickyErr()
}

func (c *Context) StreamQuery(h backend.Handle) error {
	s, err := c.stream(h)
	if err != nil {
		return err
	}
	if err := c.stickyErr(); err != nil {
		return err
	}
	if !s.idle() {
		return backend.ErrNotReady
	}
	return nil
}

func (c *Context) StreamWaitEvent(h, ev backend.Handle) error {
	s, err := c.stream(h)
	if err != nil {
		return err
	}
	e, err := c.event(ev)
	if err != nil {
		return err
	}
	if e.shared != nil {
		gen := e.shared.target()
		c.enqueue(h, s, func() { e.shared.wait(gen) })
		return nil
	}
	if r := e.current(); r != nil {
		c.enqueue(h, s, func() { <-r.done })
	}
	return nil
}

func (c *Context) EventCreate(flags uint32) (backend.Handle, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := &event{noTiming: flags&0x2 != 0}
	if flags&0x4 != 0 { // CU_EVENT_INTERPROCESS
		if !e.noTiming {
			return 0, fmt.Errorf("an interprocess event must disable timing: %w", backend.ErrInvalidValue)
		}
		shared, err := newSharedEvent()
		if err != nil {
			return 0, err
		}
		e.shared = shared
	}
	h := c.handle()
	c.events[h] = e
	return h, nil
}

func (c *Context) EventDestroy(h backend.Handle) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.events[h]; !ok {
		return fmt.Errorf("destroy event %d: %w", h, backend.ErrInvalidHandle)
	}
	delete(c.events, h)
	return nil
}

func (c *Context) EventRecord(ev, h backend.Handle) error {
	e, err := c.event(ev)
	if err != nil {
		return err
	}
	s, err := c.stream(h)
	if err != nil {
		return err
	}
	r := &record{done: make(chan struct{})}
	e.mu.Lock()
	e.last = r
	e.mu.Unlock()
	if e.shared != nil {
		gen := e.shared.record()
		c.enqueue(h, s, func() { close(r.done); e.shared.finish(gen) })
		return nil
	}
	c.enqueue(h, s, func() { r.at = time.Now(); close(r.done) })
	return nil
}

func (c *Context) EventSynchronize(ev backend.Handle) error {
	e, err := c.event(ev)
	if err != nil {
		return err
	}
	if e.shared != nil {
		e.shared.wait(e.shared.target())
	} else if r := e.current(); r != nil {
		<-r.done
	}
	return c.stickyErr()
}

func (c *Context) EventQuery(ev backend.Handle) error {
	e, err := c.event(ev)
	if err != nil {
		return err
	}
	if e.shared != nil && !e.shared.reached(e.shared.target()) || e.shared == nil && !e.current().complete() {
		return backend.ErrNotReady
	}
	return nil
}

func (c *Context) EventElapsedTime(start, end backend.Handle) (float32, error) {
	var rs [2]*record
	for i, h := range []backend.Handle{start, end} {
		e, err := c.event(h)
		if err != nil {
			return 0, err
		}
		if e.noTiming {
			return 0, fmt.Errorf("event %d was created with timing disabled: %w", h, backend.ErrInvalidHandle)
		}
		if rs[i] = e.current(); rs[i] == nil {
			return 0, fmt.Errorf("event %d never recorded: %w", h, backend.ErrInvalidHandle)
		}
		if !rs[i].complete() {
			return 0, backend.ErrNotReady
		}
	}
	return float32(rs[1].at.Sub(rs[0].at).Seconds() * 1000), nil
}

func (c *Context) Synchronize() error {
	c.mu.Lock()
	all := make([]*stream, 0, len(c.streams))
	for _, s := range c.streams {
		all = append(all, s)
	}
	c.mu.Unlock()
	for _, s := range all {
		s.sync()
	}
	return c.stickyErr()
}

// Close waits for pending work, stops the streams and frees every allocation.
func (c *Context) Close() error {
	c.mu.Lock()
	streams := c.streams
	c.streams = map[backend.Handle]*stream{}
	for _, e := range c.events {
		if e.shared != nil {
			e.shared.abandon() // a wait on another process's record ends with the context (ipc.go)
		}
	}
	c.mu.Unlock()
	for _, s := range streams {
		s.stop()
	}
	c.closeFamilies()
	c.mem.mu.Lock()
	used := c.mem.used
	c.mem.alloc, c.mem.bases, c.mem.used = map[uint64]*allocation{}, nil, 0
	c.mem.mu.Unlock()
	c.b.release(c.ordinal, used)
	return nil
}
