package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
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
	var cfg Config
	if err := json.NewDecoder(io.LimitReader(os.Stdin, 1<<20)).Decode(&cfg); err != nil {
		return fmt.Errorf("worker: reading config from stdin: %w", err)
	}
	var conn net.Conn
	var ch *ivshmem.Channel
	var err error
	if cfg.Channel == "ivshmem" {
		if ch, err = ivshmem.AdoptSlot(os.NewFile(ConnFD, "ivshmem"), cfg.Slot, max(cfg.Slots, 1)); err == nil {
			conn = newIvshmemConn(ch, cfg.PeerTimeout)
		}
	} else {
		conn, err = newBlockingConn(ConnFD, frameTimeout)
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
	if ch != nil {
		if err := s.adoptIvshmem(ch); err != nil {
			s.close()
			return err
		}
	}
	if uc := openLaneSocket(); uc != nil {
		s.EnableLanes()
		go s.serveLaneSocket(uc)
		defer uc.Close()
	}
	if uc := openArenaSocket(); uc != nil {
		s.SetArenaBudget(socketBudget(uc))
		defer uc.Close()
	}
	if uc := openMemorySocket(); uc != nil {
		s.SetMemoryLedger(socketLedger(uc))
		defer uc.Close()
	}
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		enc := json.NewEncoder(statsOut)
		t := time.NewTicker(StatsPeriod)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = enc.Encode(s.Stats.Snapshot())
			}
		}
	}()
	err = s.Serve(ctx)
	close(done)
	<-exited
	_ = json.NewEncoder(statsOut).Encode(s.Stats.Snapshot())
	log.Info("session ended", "err", err)
	return err
}
