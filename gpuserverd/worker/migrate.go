package worker

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sort"
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
	State       string `json:"state"`
	Round       int    `json:"round"`
	CopiedBytes uint64 `json:"copied_bytes"`
	TotalBytes  uint64 `json:"total_bytes"` // the program's allocations when the migration began
	// Via is how the memory went: "stream" (copied through the connection, pre-copied while the
	// program ran) or "handover" (the same physical memory mapped by the new worker on the same
	// GPU: handover.go); HandedBytes is what the handover mapped.
	Via         string  `json:"via,omitempty"`
	HandedBytes uint64  `json:"handed_bytes,omitempty"`
	PauseMs     float64 `json:"pause_ms,omitempty"`
	TotalMs     float64 `json:"total_ms,omitempty"`
	Error       string  `json:"error,omitempty"`
}

// UnderWay says whether the migration has not ended yet (pre-copying or paused).
func (p *MigrationProgress) UnderWay() bool {
	return p != nil && (p.State == "precopy" || p.State == "paused")
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
// accepted MigrateIn); address is where the guest reaches that server. The memory is handed over
// where the new worker is on the same GPU (handover.go), unless stream asks to copy it through
// the connection. It returns once the session has moved (the serving goroutine then drains and
// ends) or failed to.
func (s *Session) Migrate(out net.Conn, address string, stream bool) (err error) {
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
	s.tellServer() // a move under way: the server bills no further than this worker reports

	iw := newImageWriter(out)
	buf := make([]byte, copyBuf)
	var offer *handoverSource
	if !stream {
		if offer, err = s.offerMemory(iw); err != nil {
			return err
		}
	}
	if offer != nil {
		// However the migration ends, the socket and any connection on it go with it.
		defer func() {
			if c := offer.wait(0); c != nil {
				c.Close()
			}
		}()
	}
	taken := func() bool { return offer != nil && offer.taken() }
	if err := s.precopyRounds(iw, buf, prog, taken); err != nil {
		return err
	}
	prog.Via = "stream"
	var handed *net.UnixConn
	if offer != nil {
		if handed = offer.wait(handoverWait); handed != nil {
			defer handed.Close()
			prog.Via = "handover"
		}
	}
	return s.handOff(iw, out, address, buf, prog, handed)
}

// precopyRounds sends the program's memory while it runs, each round what it wrote since the
// last, until little is left, the rounds stop paying, or stop says the memory is to be handed over.
func (s *Session) precopyRounds(iw *imageWriter, buf []byte, prog *MigrationProgress, stop func() bool) error {
	var sent uint64
	for round := 1; round <= maxPrecopyRounds && !stop(); round++ {
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
			if err := s.precopy(iw, r, buf, prog, stop); err != nil {
				return err
			}
		}
		if err := iw.flush(); err != nil {
			return fmt.Errorf("sending to the new server: %w", err)
		}
	}
	return nil
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
func (s *Session) precopy(iw *imageWriter, r allocRef, buf []byte, prog *MigrationProgress, stop func() bool) error {
	for off := uint64(0); off < r.size && !stop(); {
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

// handOff pauses the session, hands its memory over on handed (if not nil), sends the image and
// what is not clean nor handed over, and on the new worker's MigrateReady redirects the guest
// there.
func (s *Session) handOff(iw *imageWriter, out net.Conn, address string, buf []byte, prog *MigrationProgress, handed *net.UnixConn) (err error) {
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
	// The new server bills from the hand-off once it restores: this one stops billing there
	// now, before the image leaves, and bills on only if the move fails.
	s.Stats.pausing(img.HandOff)
	s.tellServer()
	defer func() {
		if err != nil {
			s.Stats.pausing(time.Time{})
			s.tellServer()
		}
	}()
	covered := make([][]backend.SharedMapping, len(img.Devices))
	if handed != nil {
		var err error
		if covered, err = s.handMemory(handed, prog); err != nil {
			return err
		}
		img.Handed = true
	}
	if err := iw.image(img); err != nil {
		return fmt.Errorf("sending to the new server: %w", err)
	}
	for i, di := range img.Devices {
		if di == nil {
			continue
		}
		for _, r := range di.Context.Regions {
			if s.dirty.isClean(i, r.Addr, r.Bytes) || within(covered[i], r.Addr, r.Bytes) {
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
	s.releaseAfterHandOff() // after the guest was redirected: not part of its pause
	s.Stats.handedOff(img.HandOff)
	s.log.Info("session moved", "target", address, "via", prog.Via, "pause_ms", prog.PauseMs, "copied_bytes", prog.CopiedBytes, "handed_bytes", prog.HandedBytes)
	return nil
}

// handMemory passes every device's memory to the new worker on c (the session is paused and
// idle) and returns, by device index, the mappings it handed over.
func (s *Session) handMemory(c *net.UnixConn, prog *MigrationProgress) ([][]backend.SharedMapping, error) {
	covered := make([][]backend.SharedMapping, len(s.devs))
	for i, d := range s.devs {
		if d == nil {
			continue
		}
		ex, ok := d.ctx.(backend.MemoryExporter)
		if !ok {
			return nil, fmt.Errorf("device %d's context cannot hand its memory over", i)
		}
		maps, err := ex.ExportMemory()
		if err != nil {
			return nil, fmt.Errorf("device %d: exporting its memory: %w", i, err)
		}
		err = sendMemory(c, i, maps)
		for _, m := range maps {
			m.File.Close() // the new worker holds its own descriptors now
			prog.HandedBytes += m.Bytes
		}
		if err != nil {
			return nil, err
		}
		slices.SortFunc(maps, func(a, b backend.SharedMapping) int { return cmp.Compare(a.Addr, b.Addr) })
		covered[i] = maps
	}
	if err := endMemory(c); err != nil {
		return nil, fmt.Errorf("handing memory over: %w", err)
	}
	return covered, nil
}

// within says whether [addr, addr+n) lies inside one of maps (sorted by address).
func within(maps []backend.SharedMapping, addr, n uint64) bool {
	i := sort.Search(len(maps), func(i int) bool { return maps[i].Addr > addr }) - 1
	return i >= 0 && addr-maps[i].Addr <= maps[i].Bytes && n <= maps[i].Bytes-(addr-maps[i].Addr)
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
