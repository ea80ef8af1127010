package worker

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"gpucloud/gpuserverd/backend"
)

// unmovable names what keeps the session from being imaged ("" when nothing does): state that
// lives outside the worker's contexts and that a restored worker could not take over.
func (s *Session) unmovable() string {
	var why []string
	if s.shm != nil {
		why = append(why, "a shared-memory arena (a client on the GPU's own host)")
	}
	if s.cfg.Channel != "" {
		why = append(why, "an ivshmem channel")
	}
	if len(s.peers) > 0 {
		why = append(why, "peer access between its GPUs")
	}
	if len(s.comms.comms) > 0 {
		why = append(why, "NCCL communicators")
	}
	if len(s.ipc.exports)+len(s.ipc.imports) > 0 {
		why = append(why, "objects shared with its instance's other processes (IPC)")
	}
	for _, d := range s.devs {
		if d == nil {
			continue
		}
		if len(d.fam.physical)+len(d.fam.mappings) > 0 {
			why = append(why, "virtual memory mappings it made itself (cuMemCreate/cuMemMap)")
		}
		if len(d.fam.arrays) > 0 {
			why = append(why, "arrays")
		}
		if d.lib.live() {
			why = append(why, "math-library objects (cuSPARSE, cuSOLVER, cuFFT, cuRAND or nvJPEG)")
		}
	}
	slices.Sort(why)
	why = slices.Compact(why)
	return strings.Join(why, ", ")
}

// sessionImage waits for the session's GPU work and describes the session. It runs on the
// serving goroutine (the backend's calls do), between frames.
func (s *Session) sessionImage() (*SessionImage, error) {
	if why := s.unmovable(); why != "" {
		return nil, fmt.Errorf("the session holds %s, which cannot be checkpointed or moved: %w", why, backend.ErrNotSupported)
	}
	img := &SessionImage{Version: ImageVersion, SessionID: s.cfg.SessionID, Current: s.current,
		Devices: make([]*DeviceImage, len(s.devs))}
	for i, d := range s.devs {
		if d == nil {
			continue
		}
		cp, ok := d.ctx.(backend.Checkpointer)
		if !ok {
			return nil, fmt.Errorf("the %s backend cannot checkpoint a context: %w", s.b.Kind(), backend.ErrNotSupported)
		}
		ci, err := cp.Image()
		if err != nil {
			return nil, fmt.Errorf("device %d: %w", i, err)
		}
		img.Devices[i] = &DeviceImage{Allocs: maps.Clone(d.allocs), Used: d.used, Blas: maps.Clone(d.blas.own), Context: ci}
	}
	if s.pending != nil {
		img.Pending = int32(backend.ResultOf(s.pending))
	}
	if s.resume != nil {
		img.In, img.Out, img.Secret, img.WindowMs = s.resume.state()
		img.In = s.consumed // what was read ahead and not served, the guest sends again
	}
	return img, nil
}

// copyBuf is the host buffer device memory is read through for an image.
const copyBuf = 16 << 20

// writeRegion reads [addr, addr+n) of device dev and writes it as contents records.
func (s *Session) writeRegion(iw *imageWriter, dev int, addr, n uint64, buf []byte) error {
	d := s.devs[dev]
	for n > 0 {
		k := min(n, uint64(len(buf)))
		if err := d.ctx.MemcpyDtoH(buf[:k], addr, 0, false); err != nil {
			return fmt.Errorf("reading %#x of device %d for the image: %w", addr, dev, err)
		}
		if err := iw.data(dev, addr, buf[:k]); err != nil {
			return fmt.Errorf("writing the image: %w", err)
		}
		addr, n = addr+k, n-k
	}
	return nil
}

// Checkpoint writes the session's whole image to w: the image, every region's contents, the
// end. It runs on the serving goroutine; the session goes on afterwards.
func (s *Session) Checkpoint(w io.Writer) error {
	img, err := s.sessionImage()
	if err != nil {
		return err
	}
	iw := newImageWriter(w)
	if err := iw.image(img); err != nil {
		return err
	}
	buf := make([]byte, copyBuf)
	for i, di := range img.Devices {
		if di == nil {
			continue
		}
		for _, r := range di.Context.Regions {
			if err := s.writeRegion(iw, i, r.Addr, r.Bytes, buf); err != nil {
				return err
			}
		}
	}
	return iw.end()
}

// restoring is an image a restored session applies when it starts serving.
type restoring struct {
	img    *SessionImage
	chunks []imageChunkRec
	// done is told whether the session came back (nil) or why not; it may tell the sender.
	done func(error)
}

// Restore makes s, not yet serving, a session rebuilt from img and chunks: Serve applies them on
// its own thread (a backend's context is current there) instead of answering a handshake, and
// then calls done with the outcome.
func (s *Session) Restore(img *SessionImage, chunks []imageChunkRec, done func(error)) error {
	if img.SessionID != s.cfg.SessionID {
		return fmt.Errorf("restore: the image is of session %q, this worker serves %q", img.SessionID, s.cfg.SessionID)
	}
	if len(img.Devices) != len(s.cfg.Devices) {
		return fmt.Errorf("restore: the image holds %d devices, the session is granted %d", len(img.Devices), len(s.cfg.Devices))
	}
	if _, ok := s.b.(backend.Restorer); !ok {
		return fmt.Errorf("restore: the %s backend cannot restore a context: %w", s.b.Kind(), backend.ErrNotSupported)
	}
	s.restoring = &restoring{img: img, chunks: chunks, done: done}
	return nil
}

// applyImage rebuilds the session's contexts and writes their memory back.
func (s *Session) applyImage() error {
	img, rb := s.restoring.img, s.b.(backend.Restorer)
	defer img.closeShared()     // the restored mappings hold the memory handed over
	handed := img.handedSpans() // what was pre-copied into them is stale
	for i, di := range img.Devices {
		if di == nil {
			continue
		}
		// Charged as charge does: the session's quota (this server's token's), then the
		// instance's across its sessions here.
		if q := s.cfg.MemoryQuota; q > 0 && di.Used > q {
			return fmt.Errorf("restore: the session holds %d bytes on device %d, past its quota of %d here: %w",
				di.Used, i, q, backend.ErrOutOfMemory)
		}
		if s.cfg.MemoryQuota > 0 && s.ledger != nil && di.Used > 0 {
			ok, used, err := s.ledger(i, int64(di.Used))
			switch {
			case err != nil: // the server's ledger did not answer (it is restarting): try again later
				return fmt.Errorf("restore: charging %d bytes on device %d to the instance's memory quota: %w (%w)",
					di.Used, i, err, backend.ErrOutOfMemory)
			case !ok:
				return fmt.Errorf("restore: the instance's memory quota has no room for %d bytes on device %d (its sessions here hold %d of %d): %w",
					di.Used, i, used, s.cfg.MemoryQuota, backend.ErrOutOfMemory)
			}
		}
		ctx, err := rb.RestoreContext(s.cfg.Devices[i], di.Context)
		if err != nil {
			return fmt.Errorf("restore: device %d: %w", i, err)
		}
		d := &device{index: i, ordinal: s.cfg.Devices[i], ctx: ctx, allocs: di.Allocs, used: di.Used}
		if d.allocs == nil {
			d.allocs = map[uint64]uint64{}
		}
		d.blas.own = di.Blas
		s.devs[i] = d // closed with the session from here on
		if d.ring, err = newRing(ctx); err != nil {
			return fmt.Errorf("restore: device %d: %w", i, err)
		}
		s.Stats.memory(d.ordinal, int64(d.used))
	}
	for _, c := range s.restoring.chunks {
		if within(handed[c.dev], c.addr, uint64(len(c.data))) {
			continue
		}
		if err := s.devs[c.dev].ctx.MemcpyHtoD(c.addr, c.data, 0, false); err != nil {
			return fmt.Errorf("restore: writing %#x of device %d: %w", c.addr, c.dev, err)
		}
	}
	s.restoring.chunks = nil
	s.restored = true
	s.current = img.Current
	if img.Pending != 0 {
		s.pending = backend.Result(img.Pending)
	}
	return nil
}

// stopAfterCheckpoint ends serving here after a checkpoint that stops the session: the guest's
// stream is shut, and the guest, resuming, waits for the session's restore (the server holds off
// its Resume meanwhile). Caller holds exec.
func (s *Session) stopAfterCheckpoint() {
	s.handedOff = true
	s.Stats.handedOff(time.Now().UTC())
	s.resume.handOff()
	s.drainAfterHandOff()
	s.releaseAfterHandOff() // the image holds the memory now
}

// handOffDrain bounds how long a worker whose session went elsewhere waits for its guest to
// close the old connection (the guest reads to the stream's end, then closes it).
const handOffDrain = 30 * time.Second

// drainAfterHandOff ends the old connection after handOffDrain even if the guest never closes
// it, so the worker (and its GPU memory) does not linger.
func (s *Session) drainAfterHandOff() {
	r := s.resume
	time.AfterFunc(handOffDrain, func() { r.Close() })
}
