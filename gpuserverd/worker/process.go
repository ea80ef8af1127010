package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
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
	var restore func(*Session) error
	var err error
	b, err := backend.Open(cfg.Backend)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	if cfg.Restore != "" {
		rc, restore, err = restoreSource(cfg, deviceUUIDs(b, cfg.Devices))
		conn = rc
	} else if cfg.Channel == "ivshmem" {
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

	log = log.With("session", cfg.SessionID, "tenant", cfg.TenantID)
	s := NewSession(cfg, b, conn, log)
	s.resume = rc
	if rc != nil {
		rc.observe(s.guestGone, s.guestBack)
	}
	if restore != nil {
		if err := restore(s); err != nil {
			return fmt.Errorf("worker: %w", err)
		}
	}
	if ch != nil {
		if err := s.adoptIvshmem(ch); err != nil {
			s.close()
			return err
		}
	}
	link := newServerLink(statsOut, openArenaSocket(), openMemorySocket())
	s.notify = func() { link.writeStats(s.Stats.Snapshot()) }
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
	if ic := openIpcSocket(); ic != nil {
		defer ic.Close()
		s.SetIpcRegistry(&socketRegistry{c: ic})
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
	last := s.Stats.Snapshot()
	link.writeStats(last)
	switch {
	case cfg.AdoptDir != "" && cfg.Restore != "" && last.BillFrom.IsZero():
		// A restore that never went live was never this server's to bill (its source bills
		// it): no end is left, so the next server closes it at its start (the chaos test's
		// drains billed such a session twice).
		if link.orphaned() {
			log.Info("a restore that never went live ended while no gpuserverd ran")
		}
	case cfg.AdoptDir != "":
		// The end, where the next server looks (EndedFile) if this one does not bill it: none
		// is attached, or it is letting go of its workers for a restart at this very moment
		// (the chaos test: a session ending as its server stopped was billed only to its last
		// checkpoint). The server that bills the end removes the file. A session handed to
		// another server ended here at its hand-off, which the other bills from (the chaos
		// test's drains billed such a session twice when its server was killed mid-move).
		endAt := last.BillableUntil(time.Now().UTC())
		end := endAt.Format(time.RFC3339Nano)
		if !last.BillFrom.IsZero() {
			// A restored session: the next server bills it from here, not from the worker's start
			// (before it, its time was the old server's).
			end += "\n" + last.BillFrom.Format(time.RFC3339Nano)
		}
		if werr := os.WriteFile(EndedFile(cfg.AdoptDir, os.Getpid()), []byte(end), 0o600); werr != nil {
			log.Error("recording the session's end for the next gpuserverd", "err", werr)
		}
	}
	log.Info("session ended", "err", err)
	return err
}

// EndedFile is where a worker writes when its session ended, so that a gpuserverd that did not
// see the end (none was attached, or it was letting go for a restart) bills the session to its
// real end rather than to its last checkpoint; a restored session's file has a second line, the
// time it is billed from. The server that bills the end removes it.
func EndedFile(adoptDir string, pid int) string {
	return filepath.Join(adoptDir, fmt.Sprintf("%d.ended", pid))
}

// restoreSource reads the image a restored worker starts from (Config.Restore) and makes the
// stream the guest resumes on; restore hands the image to the session. uuids are the GPUs of the
// session's devices: a migration from a worker on the same GPUs hands its memory over.
func restoreSource(cfg Config, uuids []string) (*resumeConn, func(*Session) error, error) {
	var back net.Conn // the migrating server's connection, answered with MigrateReady
	var src io.Reader
	switch cfg.Restore {
	case "file":
		f := os.NewFile(ConnFD, "image")
		defer f.Close()
		src = f
	case "migrate":
		bc, err := newBlockingConn(ConnFD, frameTimeout)
		if err != nil {
			return nil, nil, err
		}
		bc.idle = true // the image may pause between rounds for as long as the program runs
		src, back = bc, bc
	default:
		return nil, nil, fmt.Errorf("restore %q: want file or migrate", cfg.Restore)
	}
	var img *SessionImage
	var chunks []imageChunkRec
	var err error
	if back != nil {
		img, chunks, err = readMigration(src, uuids)
	} else {
		img, chunks, err = readImage(src)
	}
	secret, window := img.secretOrNew(cfg.Restore == "migrate")
	if err == nil && (len(secret) != 32 || window == 0) {
		err = errors.New("session image: the guest holds no resume grant to come back with")
	}
	if err != nil {
		if back != nil {
			writeReady(back, nil, err)
			back.Close()
		}
		return nil, nil, err
	}
	rc := newRestoredResumeConn(cfg.SessionID, img.In, img.Out, secret, time.Duration(window)*time.Millisecond)
	restore := func(s *Session) error {
		s.resume = rc
		s.Stats.setResumeKey(secret)
		return s.Restore(img, chunks, func(err error) {
			if err == nil {
				// Live here from the hand-off, but with the guest away until it resumes here
				// (noted before the old worker hears Ready and redirects the guest, so its
				// return cannot come first): a guest that never comes is billed by no one.
				from := cmp.Or(img.HandOff, time.Now().UTC())
				s.Stats.away(from) // first: no snapshot shows it live and attached
				s.Stats.setBillFrom(from)
				s.tellServer()
			}
			if back != nil {
				writeReady(back, secret, err)
				back.Close()
			}
		})
	}
	return rc, restore, nil
}
