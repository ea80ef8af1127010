package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/ivshmem"
)

// File descriptors a worker process inherits from the server (exec.Cmd.ExtraFiles start at 3).
const (
	ConnFD  = 3 // the client's connection, handshake already read
	StatsFD = 4 // JSON lines of Snapshot, one per StatsPeriod and a last one at the end
)

// StatsPeriod is how often a worker reports its usage figures to the server.
const StatsPeriod = time.Second

// Main is the worker process: config on stdin, connection on fd 3, stats to fd 4.
func Main(ctx context.Context, log *slog.Logger) error {
	// The worker outlives its server (adopt.go), and with it whatever read the server's stderr,
	// which the worker logs to: a log line must not kill the session (SIGPIPE), only be lost.
	signal.Ignore(syscall.SIGPIPE)
	var cfg Config
	if err := json.NewDecoder(io.LimitReader(os.Stdin, 1<<20)).Decode(&cfg); err != nil {
		return fmt.Errorf("worker: reading config from stdin: %w", err)
	}
	var conn net.Conn
	var ch *ivshmem.Channel
	var rc *resumeConn
	var err error
	if cfg.Channel == "ivshmem" {
		if ch, err = ivshmem.AdoptSlot(os.NewFile(ConnFD, "ivshmem"), cfg.Slot, max(cfg.Slots, 1)); err == nil {
			conn = newIvshmemConn(ch, cfg.PeerTimeout)
		}
	} else {
		var bc *blockingConn
		// A TCP session's stream may be resumed on a new connection (resume.go); a Unix-socket
		// client is on this host, its arena's rings are the stream, and it does not resume.
		if bc, err = newBlockingConn(ConnFD, frameTimeout); err == nil && bc.isUnix() {
			conn = bc
		} else if err == nil {
			rc = newResumeConn(bc, cfg.SessionID)
			conn = rc
		}
	}
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	statsOut := os.NewFile(StatsFD, "stats")
	defer statsOut.Close()

	b, err := backend.Open(cfg.Backend)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	log = log.With("session", cfg.SessionID, "tenant", cfg.TenantID)
	s := NewSession(cfg, b, conn, log)
	s.resume = rc
	if ch != nil {
		if err := s.adoptIvshmem(ch); err != nil {
			s.close()
			return err
		}
	}
	link := newServerLink(statsOut, openArenaSocket(), openMemorySocket())
	if link.arenas != nil {
		s.SetArenaBudget(link.budget)
	}
	if link.memory != nil {
		s.SetMemoryLedger(link.ledger)
	}
	if nc := openNcclSocket(); nc != nil {
		defer nc.Close()
		s.SetNcclIDs(socketIDs{nc})
	}
	ctx, end := context.WithCancel(ctx)
	defer end()
	adoptTimeout := cmp.Or(cfg.AdoptTimeout, DefaultAdoptTimeout)
	if uc := openLaneSocket(); uc != nil {
		s.EnableLanes()
		go func() {
			s.serveLaneSocket(uc)
			uc.Close()
			if cfg.AdoptDir != "" {
				link.serverGone(adoptTimeout, end, log)
			}
		}()
	}
	if cfg.AdoptDir != "" {
		ln, _, err := listenAdopt(cfg.AdoptDir)
		if err != nil {
			s.close()
			return fmt.Errorf("worker: %w", err)
		}
		defer ln.Close()
		go s.serveAdoptions(ln, link, adoptTimeout, end)
	}
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(StatsPeriod)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				link.writeStats(s.Stats.Snapshot())
			}
		}
	}()
	err = s.Serve(ctx)
	close(done)
	<-exited
	link.writeStats(s.Stats.Snapshot())
	if cfg.AdoptDir != "" && link.orphaned() {
		// No server hears this end: leave it where the next one looks (EndedFile).
		end := time.Now().UTC().Format(time.RFC3339Nano)
		if werr := os.WriteFile(EndedFile(cfg.AdoptDir, os.Getpid()), []byte(end), 0o600); werr != nil {
			log.Error("recording the session's end for the next gpuserverd", "err", werr)
		}
	}
	log.Info("session ended", "err", err)
	return err
}

// EndedFile is where a worker whose session ends while no gpuserverd is attached writes when it
// ended, so the next gpuserverd bills the session to its real end rather than to its last
// checkpoint.
func EndedFile(adoptDir string, pid int) string {
	return filepath.Join(adoptDir, fmt.Sprintf("%d.ended", pid))
}
