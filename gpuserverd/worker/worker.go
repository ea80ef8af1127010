// Package worker serves one session: it runs in its own process (gpuserverd worker), holds the
// session's CUDA contexts and answers the guest library's calls on the connection it was handed.
// When the connection ends the process closes its contexts and exits, and the driver frees what
// is left; if the process dies instead, the driver frees everything all the same.
package worker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/wire"
)

// Config is what the server hands a worker about its session.
type Config struct {
	Backend     string `json:"backend"`
	SessionID   string `json:"session_id"`
	TenantID    string `json:"tenant_id"`
	Tier        string `json:"tier"`
	MemoryQuota uint64 `json:"memory_quota"` // bytes per GPU; 0 = the whole GPU
	// Devices are the backend ordinals of the granted GPUs; the guest sees them as 0..n-1.
	Devices []int `json:"devices"`
	// ShmMax bounds the session's shared arena (bytes; 0: the protocol's wire.ShmMax).
	ShmMax uint64 `json:"shm_max,omitempty"`
	// Channel is "ivshmem" when fd 3 is a VM's ivshmem channel file rather than a socket.
	Channel string `json:"channel,omitempty"`
	// Slot and Slots: the worker's session runs in slot Slot of the channel's Slots.
	Slot  int `json:"slot,omitempty"`
	Slots int `json:"slots,omitempty"`
	// PeerTimeout is how long an ivshmem guest's heartbeat may stand still (0: ivshmem.PeerTimeout).
	PeerTimeout time.Duration `json:"peer_timeout,omitempty"`
	// AdoptDir, when set, is where the worker listens for a gpuserverd that adopts it after its
	// own has gone (adopt.go); AdoptTimeout is how long it waits for one (0: DefaultAdoptTimeout).
	AdoptDir     string        `json:"adopt_dir,omitempty"`
	AdoptTimeout time.Duration `json:"adopt_timeout,omitempty"`
	// Restore, when set, rebuilds the session from an image (checkpoint.go) instead of
	// answering a handshake: "file", fd 3 is a checkpoint's image and the guest resumes with the
	// secret it holds; "migrate", fd 3 is the migrating server's connection, the image comes on
	// it and MigrateReady goes back. The guest's connection then arrives as a Resume.
	Restore string `json:"restore,omitempty"`
}

// device is the session's state on one granted GPU, created on first use.
type device struct {
	index   int // in the session's devices (the guest's ordinal)
	ordinal int
	ctx     backend.Context
	ring    *ring
	stripe  *ring             // staging for striped copies, two slots per lane; made on first use
	allocs  map[uint64]uint64 // ptr -> bytes, for the quota
	used    uint64
	blas    blasState
	fam     famState // virtual memory, pools, arrays, captures (families.go)
	// perThread are the guest threads' per-thread default streams (perthread.go).
	perThread perThreadStreams
	dnn       dnnState
	lib       libState // cuSPARSE, cuFFT, cuRAND, cuSOLVER objects (libcall.go)
}

// Capabilities is what a successful HelloReply's message tells the guest this worker takes beyond
// the protocol version: "nvml-pid", the NvmlSessionPid message.
const Capabilities = "nvml-pid"

// Session serves one connection.
type Session struct {
	cfg     Config
	b       backend.Backend
	conn    net.Conn
	r       *bufio.Reader
	w       *bufio.Writer
	log     *slog.Logger
	devs    []*device
	current int
	pending error // first error of a call sent without waiting; surfaces at the next sync
	lanes   lanes
	shm     *arena       // the shared arena of a client on this host; nil until ShmOpen
	budget  arenaBudget  // the server's total over all arenas; nil: none
	ledger  memoryLedger // the instance's quota across its sessions; nil: the session's alone
	resume  *resumeConn  // the stream a guest may resume on another connection; nil: none
	buf     []byte
	out     []byte
	Stats   *Stats
	peers   map[[2]int]bool // (device, peer) pairs with peer access enabled
	comms   ncclState       // NCCL communicators (nccl.go)
	ipc     ipcState        // objects shared with the instance's other processes (ipc.go)

	// exec is held while a frame is served, and by a checkpoint or migration between frames
	// (migrate.go): what it holds, the session's GPU state stands still.
	exec sync.Mutex
	// consumed is how many bytes of the guest's stream the served frames took (set under exec):
	// the stream a restored worker goes on from.
	consumed  uint64
	handedOff bool          // the session moved to another worker: serve nothing more
	dirty     *dirtyTracker // allocations written since a migration's last copy; nil: not tracked
	restoring *restoring    // an image to apply before serving (checkpoint.go)
	restored  bool          // rebuilt from an image: lanes, if any, were the old worker's
	migrating atomic.Bool
	notify    func() // sends a snapshot to the server now (a control request's outcome); nil: none
}

// NewSession prepares to serve conn.
func NewSession(cfg Config, b backend.Backend, conn net.Conn, log *slog.Logger) *Session {
	return &Session{
		cfg: cfg, b: b, conn: conn, log: log,
		r:     bufio.NewReaderSize(conn, 256<<10),
		w:     bufio.NewWriterSize(conn, 256<<10),
		devs:  make([]*device, len(cfg.Devices)),
		Stats: newStats(),
		lanes: lanes{session: cfg.SessionID, log: log},
	}
}

// Serve answers the handshake and then calls until the client goes away or ctx ends.
func (s *Session) Serve(ctx context.Context) error {
	// Every backend call comes from this goroutine on this one OS thread, so a backend may keep
	// its context current on the thread (CUDA's current context is per thread).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer s.close()
	defer s.lanes.closeAll() // before close: no lane may still touch a staging buffer
	defer s.conn.Close()
	stop := context.AfterFunc(ctx, func() { s.conn.Close() })
	defer stop()
	if s.restoring != nil {
		err := s.applyImage()
		if s.restoring.done != nil {
			s.restoring.done(err)
		}
		s.restoring = nil
		if err != nil {
			return fmt.Errorf("restoring the session: %w", err)
		}
		s.log.Info("session restored; waiting for the guest to resume on this worker")
	} else {
		hello := &wire.HelloReply{Version: wire.Version, SessionID: s.cfg.SessionID, Tier: s.cfg.Tier,
			MemoryQuota: s.cfg.MemoryQuota, DeviceCount: uint32(len(s.cfg.Devices)), Message: Capabilities}
		if err := s.reply(0, hello, 0); err != nil {
			return fmt.Errorf("handshake reply: %w", err)
		}
	}
	s.noteConsumed()
	for {
		err := s.serveNext()
		if err == nil {
			continue
		}
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || strings.Contains(err.Error(), "connection reset") {
			return nil
		}
		if errors.Is(err, wire.ErrDecode) {
			s.log.Warn("refusing malformed frame", "err", err)
			_ = s.reply(0, &wire.ProtocolError{Message: truncate(err.Error(), 1024)}, 0)
		}
		return err
	}
}

// serveNext waits for the guest's next frame and serves it under exec; once the session has
// moved away it only drains what the guest still sends, until the guest closes.
func (s *Session) serveNext() error {
	s.conn.SetReadDeadline(time.Time{})    // between frames: a quiet guest is waited for without limit
	if _, err := s.r.Peek(1); err != nil { // nothing consumed, nothing held
		return err
	}
	s.exec.Lock()
	defer s.exec.Unlock()
	if s.handedOff {
		_, err := s.r.Discard(s.r.Buffered())
		return err
	}
	err := s.serveOne()
	s.noteConsumed()
	return err
}

// noteConsumed records how much of the guest's stream the served frames took: what the
// connection delivered less what is read ahead. Caller holds exec (or serves alone).
func (s *Session) noteConsumed() {
	if s.resume != nil {
		s.consumed = s.resume.received() - uint64(s.r.Buffered())
	}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// dev returns the current device, creating its context on first use.
func (s *Session) dev() (*device, error) {
	if s.current >= len(s.devs) {
		return nil, backend.ErrInvalidDevice
	}
	if d := s.devs[s.current]; d != nil {
		return d, nil
	}
	ord := s.cfg.Devices[s.current]
	newContext := s.b.NewContext
	// Every session takes the device's primary context where the backend has one: NVIDIA's NCCL
	// needs it for a rank (collectives.go), a one-GPU session's world-size-1 communicator too
	// (torch.distributed with the nccl backend), and a worker serves one session, so nothing
	// else shares it.
	if pc, ok := s.b.(backend.PrimaryContexts); ok {
		newContext = pc.NewPrimaryContext
	}
	c, err := newContext(ord)
	if err != nil {
		return nil, fmt.Errorf("context on device %d: %w", ord, err)
	}
	d := &device{index: s.current, ordinal: ord, ctx: c, allocs: map[uint64]uint64{}}
	d.ring, err = newRing(c)
	if err != nil {
		c.Close()
		return nil, err
	}
	s.devs[s.current] = d
	return d, nil
}

func (s *Session) close() {
	s.closeNccl() // NCCL's communicators hold memory in the contexts
	s.closeShm()
	s.closeDevices()
	s.Stats.end()
}

// closeDevices closes the session's contexts (once: a session that moved closed them at its
// hand-off).
func (s *Session) closeDevices() {
	for i, d := range s.devs {
		if d == nil {
			continue
		}
		d.ring.free()
		if d.stripe != nil {
			d.stripe.free()
		}
		if err := d.ctx.Close(); err != nil {
			s.log.Warn("closing context", "device", d.ordinal, "err", err)
		}
		s.Stats.memory(d.ordinal, -int64(d.used))
		s.devs[i] = nil
	}
}

// releaseAfterHandOff gives back what a session that moved still held here: its contexts (their
// memory is the new worker's now, copied or handed over: the new worker holds its own references
// to handed-over memory) and their charge to the instance's quota on this server. The worker
// itself lingers until its guest closes the old connection (up to handOffDrain); holding the
// memory meanwhile refused a move of the instance back here for quota (the chaos test's keeper).
// Caller holds exec.
func (s *Session) releaseAfterHandOff() {
	for _, d := range s.devs {
		if d != nil {
			s.giveBack(d, d.used)
		}
	}
	s.closeDevices()
}

// reply writes one frame and flushes it unless more frames follow at once.
func (s *Session) reply(req uint32, m wire.Message, flags uint16) error {
	s.out = wire.AppendFrame(s.out[:0], m, flags, req)
	if _, err := s.w.Write(s.out); err != nil {
		return err
	}
	return s.w.Flush()
}

// deferErr keeps err for the next synchronising call, unless an earlier error is already waiting.
func (s *Session) deferErr(err error) {
	if s.pending == nil {
		s.pending = err
	}
}

// takePending returns and clears the deferred error of earlier asynchronous calls.
func (s *Session) takePending(err error) error {
	if err == nil && s.pending != nil {
		err, s.pending = s.pending, nil
	}
	return err
}

// okStatus is every success's Status: one value, read-only, so that an asynchronous call's
// discarded answer (a launch's) allocates nothing.
var okStatus = &wire.Status{}

func status(err error) *wire.Status {
	if err == nil {
		return okStatus
	}
	st := &wire.Status{Result: int32(backend.ResultOf(err))}
	if err != nil {
		st.Message = truncate(err.Error(), 1024)
	}
	return st
}

// deadline bounds how long a stalled client may hold a half-sent frame.
const frameTimeout = 5 * time.Minute
