// Package server is gpuserverd's front door: it accepts guest connections, verifies each
// session's token before any GPU work, admits it under its tier's rules, and hands the connection
// to a worker process of its own. It writes a usage record when the worker ends and serves the
// records, metrics and health over HTTP.
package server

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/usage"
)

// Config configures a Server.
type Config struct {
	ServerID string // this GPU server's id: the audience its tokens must name
	Listen   string // guest connections, e.g. ":7070"
	// ListenUnix, when set, is a Unix socket path for guests on this host: their sessions may open
	// a shared-memory arena (docs/gpuserverd/transports.md, "Shared memory").
	ListenUnix string
	// IvshmemDir, when set, is where VMs' ivshmem channel files appear (/dev/shm, where libvirt
	// puts them): each file named gpucloud-<instance> is served as that instance's channel
	// (package ivshmem; docs/gpuserverd/transports.md, "VMs on this host").
	IvshmemDir string
	// IvshmemSlots is how many slots (sessions at once) each channel is split into: 0 is one per
	// 64 MiB, at most 4 (ivshmem.SlotCount), and any number is lowered to a power of two leaving
	// each slot at least 16 MiB.
	IvshmemSlots int
	// IvshmemPeerTimeout is how long a VM guest's heartbeat may stand still (0: ivshmem.PeerTimeout).
	IvshmemPeerTimeout time.Duration
	Admin              string // HTTP: /usage, /metrics, /healthz
	PublicKey          ed25519.PublicKey
	// BackendKind is the resolved backend ("cuda" or "simulated") workers open.
	BackendKind string
	// WorkerCommand starts a worker process, e.g. {"/usr/bin/gpuserverd", "worker"}.
	WorkerCommand []string
	DataDir       string
	Log           *slog.Logger
	// HandshakeTimeout bounds how long a new connection may take to present its token.
	HandshakeTimeout time.Duration
	// CheckpointEvery is how often open sessions' usage is written (10s): a gpuserverd killed
	// mid-session loses at most this much of each session's time.
	CheckpointEvery time.Duration
	// ShmSessionMax bounds one session's shared arena (default DefaultShmSessionMax), and
	// ShmTotalMax all of this server's sessions' arenas together (default: half the machine's
	// RAM). Arenas are pinned host memory; see arenas.go.
	ShmSessionMax, ShmTotalMax uint64
	// MaxPendingPerSource and MaxPending bound connections that have not authenticated yet, per
	// source address and in all (preauth.go; defaults DefaultMaxPendingPerSource, DefaultMaxPending).
	MaxPendingPerSource, MaxPending int
	// MaxSessions bounds this server's sessions and MaxSessionsPerInstance one instance's
	// (defaults DefaultMaxSessions, DefaultMaxSessionsPerInstance): each session is a worker
	// process, so a token must not be able to start them without end.
	MaxSessions, MaxSessionsPerInstance int
	// AdoptTimeout is how long a worker whose server has gone waits for a new one to adopt it
	// before it ends its session (0: worker.DefaultAdoptTimeout).
	AdoptTimeout time.Duration
	// KeepSessionsOnStop: a stop (ctx ending, SIGTERM) leaves socket sessions' workers running
	// for the next gpuserverd to adopt, as a kill does, instead of ending them: an upgrade.
	KeepSessionsOnStop bool
	// AdminToken is the bearer token the admin HTTP routes want (http.go); "" generates one,
	// kept in <DataDir>/admin-token for local tools.
	AdminToken string
	// Monitor answers the guests' NVML (nil: the backend's devices only; simulated readings on
	// the simulated backend).
	Monitor *Monitor
}

// DefaultShmSessionMax is a session's arena limit unless configured: room for pinned buffers of
// a few GiB, beyond which a program is better served by pageable copies than by pinning more.
const DefaultShmSessionMax = 4 << 30

// Server serves sessions.
type Server struct {
	cfg     Config
	b       backend.Backend
	devices []backend.Device
	usage   *usage.Log
	log     *slog.Logger

	ckptMu sync.Mutex // orders checkpoints and sessions' final records; taken before mu

	mu       sync.Mutex
	sessions map[int]*session // by worker pid
	gpus     map[string]*gpuUse
	metrics  counters
	arenas   *arenaBudget
	gate     *handshakeGate
	admitted admitted              // sessions counted against the caps, by instance
	denied   *denyList             // instances whose tokens the apiserver has revoked
	memory   *memoryLedger         // shared-tier GPU memory per instance and GPU
	nccl     *ncclIDs              // NCCL unique ids per instance (ncclids.go)
	ipc      *ipcRegistry          // objects exported between an instance's processes (ipc.go)
	monitors map[*monitor]struct{} // open NVML connections (nvml.go)

	ln      net.Listener
	unixLn  net.Listener // nil without ListenUnix
	adminLn net.Listener
	wg      sync.WaitGroup
	adopted []*adoptedWorker // adopted by New, supervised from Serve
	// serveCtx is Serve's: sessions the admin API starts (a restore) run under it.
	serveCtx context.Context
	// parked are sessions a checkpoint stopped for a restore, until when (mobility.go); s.mu.
	parked map[string]time.Time
	moves  moveBook // a drain's moves off this server (drainmoves.go)
	// keyAwaited, when set (tests), is told each time a lane or resume begins to wait for the
	// report of its key (awaitSession).
	keyAwaited func(sid string)
}

type counters struct {
	accepted, refused, ended, usageErrors, cut, adopted uint64
	refusedBy                                           map[string]uint64
}

// New opens the usage log and the device inventory; b is the backend chosen for this server.
func New(cfg Config, b backend.Backend) (*Server, error) {
	if cfg.ServerID == "" || len(cfg.PublicKey) != ed25519.PublicKeySize || len(cfg.WorkerCommand) == 0 {
		return nil, errors.New("server: ServerID, a 32-byte Ed25519 PublicKey and WorkerCommand are required")
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.HandshakeTimeout == 0 {
		cfg.HandshakeTimeout = 10 * time.Second
	}
	if cfg.CheckpointEvery <= 0 {
		cfg.CheckpointEvery = 10 * time.Second
	}
	if cfg.ShmSessionMax == 0 {
		cfg.ShmSessionMax = DefaultShmSessionMax
	}
	if cfg.ShmTotalMax == 0 {
		cfg.ShmTotalMax = physicalMemory() / 2
	}
	if cfg.MaxPendingPerSource <= 0 {
		cfg.MaxPendingPerSource = DefaultMaxPendingPerSource
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = DefaultMaxPending
	}
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = DefaultMaxSessions
	}
	if cfg.MaxSessionsPerInstance <= 0 {
		cfg.MaxSessionsPerInstance = DefaultMaxSessionsPerInstance
	}
	devs, err := b.Devices()
	if err != nil {
		return nil, fmt.Errorf("server: listing devices: %w", err)
	}
	ul, err := usage.Open(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, b: b, devices: devs, usage: ul, log: cfg.Log,
		sessions: map[int]*session{}, gpus: map[string]*gpuUse{}, monitors: map[*monitor]struct{}{},
		metrics: counters{refusedBy: map[string]uint64{}}, arenas: newArenaBudget(cfg.ShmTotalMax),
		gate: newHandshakeGate(cfg.MaxPendingPerSource, cfg.MaxPending), admitted: admitted{byInstance: map[string]int{}},
		denied: newDenyList(), memory: newMemoryLedger(), nccl: newNcclIDs(), ipc: newIpcRegistry()}
	if err := s.loadAdminToken(); err != nil {
		ul.Close()
		return nil, fmt.Errorf("server: %w", err)
	}
	if err := s.recoverSessions(); err != nil {
		ul.Close()
		return nil, fmt.Errorf("server: %w", err)
	}
	if cfg.DataDir != "" {
		n, err := s.moves.loadAway(filepath.Join(cfg.DataDir, awayFile), time.Now())
		if err != nil {
			s.log.Error("late sessions of moves made before this start will be ended, not moved", "err", err)
		} else if n > 0 {
			s.log.Info("late sessions of moves made before this start will follow them", "moves", n)
		}
	}
	return s, nil
}

// Listen binds both ports; Addr and AdminAddr are valid after it.
func (s *Server) Listen() error {
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("server: listen %s: %w", s.cfg.Listen, err)
	}
	aln, err := net.Listen("tcp", s.cfg.Admin)
	if err != nil {
		ln.Close()
		return fmt.Errorf("server: admin listen %s: %w", s.cfg.Admin, err)
	}
	s.ln, s.adminLn = ln, aln
	if s.cfg.ListenUnix != "" {
		// A socket file left by an earlier run would make the bind fail; nothing else may be there.
		if fi, err := os.Lstat(s.cfg.ListenUnix); err == nil && fi.Mode()&os.ModeSocket != 0 {
			os.Remove(s.cfg.ListenUnix)
		}
		uln, err := net.Listen("unix", s.cfg.ListenUnix)
		if err != nil {
			ln.Close()
			aln.Close()
			return fmt.Errorf("server: listen unix %s: %w", s.cfg.ListenUnix, err)
		}
		s.unixLn = uln
	}
	return nil
}

// Addr is the guest listener's address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// AdminAddr is the HTTP listener's address.
func (s *Server) AdminAddr() net.Addr { return s.adminLn.Addr() }

// Serve runs until ctx ends, then waits for sessions' workers to finish.
func (s *Server) Serve(ctx context.Context) error {
	s.serveCtx = ctx
	hs, bound := s.adminServer()
	go hs.Serve(bound(s.adminLn))
	ckctx, stopCkpt := context.WithCancel(context.Background())
	ckDone := make(chan struct{})
	go func() {
		defer close(ckDone)
		s.RunCheckpoints(ckctx, s.cfg.CheckpointEvery)
	}()
	go func() {
		<-ctx.Done()
		s.ln.Close()
		if s.unixLn != nil {
			s.unixLn.Close()
		}
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hs.Shutdown(sctx)
	}()
	s.superviseAdopted(ctx)
	s.log.Info("gpuserverd serving", "addr", s.ln.Addr(), "admin", s.adminLn.Addr(),
		"backend", s.b.Kind(), "gpus", len(s.devices), "server_id", s.cfg.ServerID)
	if s.unixLn != nil {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.acceptLoop(ctx, s.unixLn)
		}()
	}
	if s.cfg.IvshmemDir != "" {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.watchChannels(ctx, s.cfg.IvshmemDir)
		}()
	}
	err := s.acceptLoop(ctx, s.ln)
	s.wg.Wait() // sessions end and write their final records; checkpoints go on meanwhile
	stopCkpt()
	<-ckDone
	s.usage.Close()
	return err
}

// acceptLoop serves ln's connections until it closes.
func (s *Server) acceptLoop(ctx context.Context, ln net.Listener) error {
	var err error
	for {
		conn, aerr := ln.Accept()
		if aerr != nil {
			if ctx.Err() == nil {
				err = fmt.Errorf("server: accept: %w", aerr)
			}
			break
		}
		source := sourceOf(conn)
		if !s.gate.enter(source) {
			conn.Close() // over a pre-authentication limit: nothing is spent on it
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.handle(ctx, conn, sync.OnceFunc(func() { s.gate.leave(source) }))
		}()
	}
	return err
}

// ActiveSessions lists the session ids being served.
func (s *Server) ActiveSessions() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for _, se := range s.sessions {
		ids = append(ids, se.claims.SessionID)
	}
	return ids
}
