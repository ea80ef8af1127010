package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/ivshmem"
	"gpucloud/gpuserverd/wire"
	"gpucloud/gpuserverd/worker"
	"gpucloud/internal/sessiontoken"
)

// VMs on this host reach gpuserverd through ivshmem channels (package ivshmem): hostd creates
// /dev/shm/gpucloud-<instance> (mode 0660) before the domain starts and removes it when the
// instance goes; QEMU maps it into that VM alone. gpuserverd finds the files by scanning
// IvshmemDir, so it needs no word from hostd and a restart finds them again. Each channel is
// split into slots, each served by its own goroutine: one session per slot at a time, claimed by
// a guest process, whose hello (token and all) comes through the slot; the token must name the channel's instance, so a VM cannot
// use another instance's session token (nor reach another VM's file, which is not mapped into it).

// channelScan is how often IvshmemDir is looked at for new and removed channel files;
// claimPoll how often an idle channel is checked for a claim.
const (
	channelScan = time.Second
	claimPoll   = 10 * time.Millisecond
)

// watchChannels serves every channel file that appears in dir until ctx ends.
func (s *Server) watchChannels(ctx context.Context, dir string) {
	type served struct {
		ino    uint64
		cancel context.CancelFunc
	}
	var wg sync.WaitGroup
	live := map[string]served{}
	complained := map[string]string{}
	t := time.NewTicker(channelScan)
	defer t.Stop()
	for {
		seen := map[string]bool{}
		entries, err := os.ReadDir(dir)
		if err != nil && complained[dir] != err.Error() {
			complained[dir] = err.Error()
			s.log.Error("ivshmem: reading the channel directory", "dir", dir, "err", err)
		}
		for _, e := range entries {
			inst, ok := ivshmem.InstanceOf(e.Name())
			if !ok {
				continue
			}
			path := filepath.Join(dir, e.Name())
			fi, err := os.Lstat(path)
			if err == nil {
				err = ivshmem.CheckFile(fi)
			}
			if err != nil {
				if complained[path] != err.Error() {
					complained[path] = err.Error()
					s.log.Warn("ivshmem: not serving channel file", "path", path, "err", err)
				}
				continue
			}
			ino := inode(fi)
			seen[path] = true
			if sv, ok := live[path]; ok && sv.ino == ino {
				continue
			} else if ok {
				sv.cancel() // the file was replaced: serve the new one
			}
			cctx, cancel := context.WithCancel(ctx)
			live[path] = served{ino, cancel}
			delete(complained, path)
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := s.serveChannel(cctx, path, inst); err != nil && cctx.Err() == nil {
					s.log.Warn("ivshmem: channel", "path", path, "err", err)
				}
			}()
		}
		for path, sv := range live {
			if !seen[path] {
				sv.cancel()
				delete(live, path)
			}
		}
		select {
		case <-ctx.Done():
			for _, sv := range live {
				sv.cancel()
			}
			wg.Wait()
			return
		case <-t.C:
		}
	}
}

// serveChannel sets up one channel file, split into slots (ivshmem.SlotCount), and serves every
// slot's claims until ctx ends: each slot is a channel of its own, so several processes in the VM
// have sessions at once.
func (s *Server) serveChannel(ctx context.Context, path, instance string) error {
	ch, err := ivshmem.Open(path)
	if err != nil {
		return err
	}
	defer ch.Close()
	log := s.log.With("channel", path, "instance", instance)
	ch.Retire() // a guest of an earlier layout (a restarted gpuserverd) sees its session end
	slots := ch.Slots(ivshmem.SlotCount(int64(len(ch.Mem)), s.cfg.IvshmemSlots))
	for _, sl := range slots {
		sl.Reset()
	}
	log.Info("ivshmem channel ready", "bytes", len(ch.Mem), "slots", len(slots))
	stopBeat, beatDone := make(chan struct{}), make(chan struct{})
	defer func() { close(stopBeat); <-beatDone }() // before the region is unmapped
	// The guests' proof that gpuserverd is there, for as long as it serves the file.
	go func() {
		defer close(beatDone)
		t := time.NewTicker(ivshmem.BeatPeriod)
		defer t.Stop()
		for {
			for _, sl := range slots {
				sl.Beat()
			}
			select {
			case <-stopBeat:
				return
			case <-t.C:
			}
		}
	}()
	// One poller for the idle slots (every claimPoll, however many slots), one goroutine per
	// claim. A claim ends when its worker does (the guest let the slot go, or its heartbeat stood
	// still: a killed process), or when its hello is refused; the slot is then reset for the next
	// claim, so no claim outlives its process.
	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		for _, sl := range slots {
			sl.Reset() // a guest still holding it learns that its session has ended
		}
	}()
	busy := make([]atomic.Bool, len(slots))
	t := time.NewTicker(claimPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		for i, sl := range slots {
			if busy[i].Load() {
				continue
			}
			switch sl.State() {
			case ivshmem.StateFree:
				continue
			case ivshmem.StateClaimed:
				busy[i].Store(true)
				wg.Add(1)
				go func() {
					defer wg.Done()
					s.serveClaim(ctx, sl, instance, log.With("slot", sl.Index))
					sl.Reset()
					busy[i].Store(false)
				}()
			default: // let go, or a state the guest wrote that means nothing
				sl.Reset()
			}
		}
	}
}

// serveClaim reads a claiming guest's hello from the region, verifies it and runs its session.
func (s *Server) serveClaim(ctx context.Context, ch *ivshmem.Channel, instance string, log *slog.Logger) {
	gen := ch.Generation()
	deadline := time.Now().Add(s.cfg.HandshakeTimeout)
	alive := func() error {
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case ch.State() != ivshmem.StateClaimed || ch.Generation() != gen:
			return io.EOF
		case time.Now().After(deadline):
			return errors.New("no hello within the handshake timeout")
		}
		return nil
	}
	in, out := worker.NewPollRing(ch.Mem, 0, alive), worker.NewPollRing(ch.Mem, 1, alive)
	claims, ordinals, err := s.channelHello(in, instance)
	if err != nil {
		if frame := s.refusalReply(err, log); frame != nil {
			out.Write(frame)
			s.awaitRelease(ctx, ch, gen)
		}
		return
	}
	defer s.release(claims)
	s.count("")
	// The worker inherits its own descriptor of the file (and maps only its slot); ours stays open
	// for the heartbeat.
	if err := s.startWorker(ctx, ch.File, func() error { return nil }, workerChannel{kind: "ivshmem", slot: ch.Index, count: ch.Count}, claims, ordinals, log); err != nil {
		log.Error("worker", "session", claims.SessionID, "err", err)
	}
}

// channelHello reads and verifies the hello in ring 0; its token must be for the channel's instance.
func (s *Server) channelHello(in io.Reader, instance string) (sessiontoken.Claims, []int, error) {
	h, p, err := readHello(in)
	if err != nil {
		return sessiontoken.Claims{}, nil, err
	}
	c, ordinals, err := s.hello(h, p)
	if err != nil {
		return c, nil, err
	}
	if c.InstanceID != instance {
		s.release(c)
		return c, nil, &refusal{backend.ErrNotPermitted, "instance",
			fmt.Sprintf("session token is for instance %q, not %q whose ivshmem channel this is", c.InstanceID, instance)}
	}
	return c, ordinals, nil
}

// readHello reads a channel's first frame, a Hello of at most helloLimit bytes: the region is
// the guest's to write, so nothing in it is trusted.
func readHello(in io.Reader) (wire.Header, []byte, error) {
	return readOpening(in, helloLimit, wire.TypeHello)
}

// awaitRelease gives a refused guest time to read its answer: until it lets the channel go, its
// heartbeat stops, the handshake timeout passes (a guest that never lets go does not keep the
// channel), or ctx ends.
func (s *Server) awaitRelease(ctx context.Context, ch *ivshmem.Channel, gen uint32) {
	timeout := s.cfg.IvshmemPeerTimeout
	if timeout <= 0 {
		timeout = ivshmem.PeerTimeout
	}
	deadline := time.Now().Add(s.cfg.HandshakeTimeout)
	beat, at := ch.ClientBeat(), time.Now()
	t := time.NewTicker(claimPoll)
	defer t.Stop()
	for ch.State() == ivshmem.StateClaimed && ch.Generation() == gen && time.Now().Before(deadline) {
		if b := ch.ClientBeat(); b != beat {
			beat, at = b, time.Now()
		} else if time.Since(at) > timeout {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func inode(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}
