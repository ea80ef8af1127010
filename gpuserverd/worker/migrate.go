package worker

import (
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/wire"
)

// A live migration (issue 18; docs/gpuserverd/sessions.md, "Live migration") sends the
// session's image to a worker of another server while the program runs: first rounds of the
// allocations' contents, each round only what was written since the last (dirtyTracker), then,
// with the session paused between two frames, the image and the rest. The new worker answers
// MigrateReady once it holds the session; this one then writes MigrateRedirect as the last frame
// of the guest's stream and stops serving. The guest resumes its stream on the new worker, which
// answers every call this one had not read. A migration that fails before MigrateReady leaves
// the session running here as if nothing happened.

// MigrationProgress is a migration's state, reported in the worker's snapshots.
type MigrationProgress struct {
	Target string `json:"target"`
	// State: "precopy", "paused", "done" or "failed".
	State       string  `json:"state"`
	Round       int     `json:"round"`
	CopiedBytes uint64  `json:"copied_bytes"`
	TotalBytes  uint64  `json:"total_bytes"` // the program's allocations when the migration began
	PauseMs     float64 `json:"pause_ms,omitempty"`
	TotalMs     float64 `json:"total_ms,omitempty"`
	Error       string  `json:"error,omitempty"`
}

const (
	// maxPrecopyRounds bounds the rounds sent while the program runs: one that writes all its
	// memory all the time would otherwise never be paused.
	maxPrecopyRounds = 4
	// precopyEnough is the dirty bytes under which pre-copying stops: the pause sends the rest.
	precopyEnough = 64 << 20
	// readyTimeout bounds how long the new worker may take to rebuild the session.
	readyTimeout = 2 * time.Minute
)

// ErrNotMovable is a migration refused before it began.
var ErrNotMovable = errors.New("session cannot move")

// redirectSize is the length of the MigrateRedirect frame naming address: the secret is always
// 32 bytes, so the old worker knows before the new one answers where the guest's stream will end.
func redirectSize(address string) int {
	return len(wire.AppendFrame(nil, &wire.MigrateRedirect{Address: address, Secret: make([]byte, 32)}, 0, 0))
}

// Migrate moves the session to the worker at the other end of out (a server's connection that
// accepted MigrateIn); address is where the guest reaches that server. It returns once the
// session has moved (the serving goroutine then drains and ends) or failed to.
func (s *Session) Migrate(out net.Conn, address string) (err error) {
	if !s.migrating.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: a migration is already under way", ErrNotMovable)
	}
	defer s.migrating.Store(false)
	start := time.Now()
	prog := &MigrationProgress{Target: address, State: "precopy"}
	defer func() {
		prog.TotalMs = float64(time.Since(start).Microseconds()) / 1000
		if err != nil {
			prog.State, prog.Error = "failed", err.Error()
		}
		s.Stats.setMigration(*prog)
	}()
	s.exec.Lock()
	why := s.unmovable()
	switch {
	case s.resume == nil:
		why = "no resumable stream (a client on the GPU's own host or a VM's channel)"
	case len(s.resume.secretCopy()) == 0:
		why = "a guest that did not ask to resume (GPUCLOUD_RESUME_S=0, or an older guest library)"
	case s.handedOff:
		why = "already moved"
	}
	if why == "" {
		// What the backend cannot rebuild is named now, before any memory is sent.
		if _, err := s.sessionImage(); err != nil {
			s.exec.Unlock()
			return fmt.Errorf("%w: %w", ErrNotMovable, err)
		}
		s.dirty = newDirtyTracker()
		for _, d := range s.devs {
			if d != nil {
				for _, n := range d.allocs {
					prog.TotalBytes += n
				}
			}
		}
	}
	s.exec.Unlock()
	if why != "" {
		return fmt.Errorf("%w: it holds %s", ErrNotMovable, why)
	}
	defer func() {
		s.exec.Lock()
		s.dirty = nil
		s.exec.Unlock()
	}()
	s.Stats.setMigration(*prog)

	iw := newImageWriter(out)
	buf := make([]byte, copyBuf)
	var sent uint64
	for round := 1; round <= maxPrecopyRounds; round++ {
		todo, left := s.precopyList()
		// Another round pays only while the dirty set at least halves: a program whose kernels
		// dirty everything (the tracker cannot see what a kernel writes) would have its whole
		// memory sent each round (measured on the H100: three times for one move).
		if round > 1 && (left < precopyEnough || left > sent/2) {
			break
		}
		sent = left
		prog.Round = round
		for _, r := range todo {
			if err := s.precopy(iw, r, buf, prog); err != nil {
				return err
			}
		}
		if err := iw.flush(); err != nil {
			return fmt.Errorf("sending to the new server: %w", err)
		}
	}
	return s.handOff(iw, out, address, buf, prog)
}

// allocRef is one allocation of device index dev.
type allocRef struct {
	dev        int
	base, size uint64
}

// precopyList is the allocations not clean, and their bytes.
func (s *Session) precopyList() ([]allocRef, uint64) {
	s.exec.Lock()
	defer s.exec.Unlock()
	var out []allocRef
	var left uint64
	for i, d := range s.devs {
		if d == nil {
			continue
		}
		for base, n := range d.allocs {
			if !s.dirty.isClean(i, base, n) {
				out = append(out, allocRef{i, base, n})
				left += n
			}
		}
	}
	return out, left
}

// precopy sends one allocation while the program runs: each piece read with the session held
// still (after its GPU work), sent after letting it go. The allocation is marked clean before its
// first piece; a write served meanwhile marks it dirty again, so the pause sends it once more.
func (s *Session) precopy(iw *imageWriter, r allocRef, buf []byte, prog *MigrationProgress) error {
	for off := uint64(0); off < r.size; {
		k := min(r.size-off, uint64(len(buf)))
		s.exec.Lock()
		d := s.devs[r.dev]
		if n, ok := d.allocs[r.base]; !ok || n != r.size {
			s.exec.Unlock()
			return nil // freed meanwhile
		}
		if off == 0 {
			s.dirty.markClean(r.dev, r.base, r.size)
		}
		err := d.ctx.Synchronize()
		if err == nil {
			err = d.ctx.MemcpyDtoH(buf[:k], r.base+off, 0, false)
		}
		s.exec.Unlock()
		if err != nil {
			return fmt.Errorf("reading %#x of device %d: %w", r.base+off, r.dev, err)
		}
		if err := iw.data(r.dev, r.base+off, buf[:k]); err != nil {
			return fmt.Errorf("sending to the new server: %w", err)
		}
		off += k
		prog.CopiedBytes += k
		s.Stats.setMigration(*prog)
	}
	return nil
}

// handOff pauses the session, sends the image and what is not clean, and on the new worker's
// MigrateReady redirects the guest there.
func (s *Session) handOff(iw *imageWriter, out net.Conn, address string, buf []byte, prog *MigrationProgress) error {
	s.exec.Lock()
	defer s.exec.Unlock()
	paused := time.Now()
	prog.State = "paused"
	s.Stats.setMigration(*prog)
	img, err := s.sessionImage()
	if err != nil {
		return err
	}
	img.In = s.consumed
	img.Out += uint64(redirectSize(address))
	img.Secret = nil // the new worker grants its own
	img.HandOff = time.Now().UTC()
	if err := iw.image(img); err != nil {
		return fmt.Errorf("sending to the new server: %w", err)
	}
	for i, di := range img.Devices {
		if di == nil {
			continue
		}
		for _, r := range di.Context.Regions {
			if s.dirty.isClean(i, r.Addr, r.Bytes) {
				continue
			}
			if err := s.writeRegion(iw, i, r.Addr, r.Bytes, buf); err != nil {
				return err
			}
			prog.CopiedBytes += r.Bytes
		}
	}
	if err := iw.end(); err != nil {
		return fmt.Errorf("sending to the new server: %w", err)
	}
	ready, err := readReady(out)
	if err != nil {
		return err
	}
	// From here the session is the new worker's: the redirect is the stream's last frame.
	if err := s.reply(0, &wire.MigrateRedirect{Address: address, Secret: ready.Secret}, 0); err != nil {
		s.log.Warn("writing the redirect; the guest reads it when it resumes here", "err", err)
	}
	s.handedOff = true
	s.resume.handOff()
	s.drainAfterHandOff()
	prog.State = "done"
	prog.PauseMs = float64(time.Since(paused).Microseconds()) / 1000
	s.Stats.handedOff(img.HandOff)
	s.log.Info("session moved", "target", address, "pause_ms", prog.PauseMs, "copied_bytes", prog.CopiedBytes)
	return nil
}

// readReady reads the new worker's MigrateReady.
func readReady(c net.Conn) (*wire.MigrateReady, error) {
	c.SetReadDeadline(time.Now().Add(readyTimeout))
	defer c.SetReadDeadline(time.Time{})
	var hb [wire.HeaderSize]byte
	if _, err := io.ReadFull(c, hb[:]); err != nil {
		return nil, fmt.Errorf("waiting for the new server to take the session: %w", err)
	}
	h, err := wire.ParseHeader(hb[:])
	if err != nil || h.Type != wire.TypeMigrateReady || h.Length > 4096 {
		return nil, fmt.Errorf("the new server answered %v instead of MigrateReady: %v", h.Type, err)
	}
	p := make([]byte, h.Length)
	if _, err := io.ReadFull(c, p); err != nil {
		return nil, fmt.Errorf("reading MigrateReady: %w", err)
	}
	var m wire.MigrateReady
	if err := m.Decode(p); err != nil {
		return nil, err
	}
	if m.Result != 0 {
		return nil, fmt.Errorf("the new server could not take the session: %s: %w", m.Message, backend.Result(m.Result))
	}
	if len(m.Secret) != 32 {
		return nil, fmt.Errorf("MigrateReady with a %d-byte secret, want 32", len(m.Secret))
	}
	return &m, nil
}
