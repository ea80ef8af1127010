package worker

import (
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"gpucloud/gpuserverd/backend"
)

// A migration between two servers on one GPU hands the session's memory over instead of copying
// it (issue 18; backend.MemoryExporter). The old worker opens an abstract Unix socket with a
// random name (a SOCK_SEQPACKET one: each message arrives whole, its descriptors with it) and
// offers it first in the image stream (an 'H' record: the socket, a secret, the
// GPU of each device). A new worker on the same host whose devices are those GPUs connects and
// proves it read the offer (the secret). The old worker pre-copies through the stream meanwhile
// (the new worker answers once its backend is up, which on a GPU takes a moment); once the offer
// is taken it stops copying, and at the pause passes every mapping of the session's memory as a
// file descriptor on that socket: the new worker maps the same physical memory at the same
// addresses and drops what was pre-copied into it. Anything else (another host, other GPUs, a
// backend that cannot export, a migration asked to copy) copies through the stream as before, the
// old worker having waited at most handoverWait past its pre-copy for the offer to be taken.
// Until the new worker answers MigrateReady it only maps the memory, never writes it, so a failed
// move leaves the session running on the old worker untouched.

// memoryOffer is the 'H' record.
type memoryOffer struct {
	Socket  string   `json:"socket"` // an abstract Unix socket ("@...")
	Secret  []byte   `json:"secret"`
	Devices []string `json:"devices"` // each device index's GPU UUID ("": not in use)
}

// HandoverEnv turns the same-GPU hand-over off for a gpuserverd's workers ("0": every move copies
// through the stream). On by default.
const HandoverEnv = "GPUSERVERD_HANDOVER"

const (
	// handoverWait is how long the old worker waits, past its pre-copy, for the new one to take
	// its offer before the pause copies through the stream instead.
	handoverWait = time.Second
	// maxHandoverFDs is the most descriptors one message carries.
	maxHandoverFDs = 64
	// handoverEnd marks the last message: no descriptors follow.
	handoverEnd = ^uint32(0)
	// maxHandedMappings bounds the mappings one device may hand over.
	maxHandedMappings = 1 << 20
)

// deviceUUIDs is the GPU of each of the session's device indexes.
func deviceUUIDs(b backend.Backend, ordinals []int) []string {
	devs, err := b.Devices()
	out := make([]string, len(ordinals))
	if err != nil {
		return out
	}
	for i, o := range ordinals {
		for _, d := range devs {
			if d.Ordinal == o {
				out[i] = d.UUID
			}
		}
	}
	return out
}

// handoverSource is the old worker's side: the socket it offered, and the new worker once it
// took the offer (or, past the wait, the old worker gave up on it).
type handoverSource struct {
	ln     *net.UnixListener
	ready  chan struct{}
	mu     sync.Mutex
	conn   *net.UnixConn
	gaveUp bool
}

// offerMemory offers the session's memory to the new worker: nil when its backend cannot hand
// memory over (the migration then copies). The offer names the GPU of every device the session
// is granted, used or not: whatever it maps by the pause must be on the same GPUs.
func (s *Session) offerMemory(iw *imageWriter) (*handoverSource, error) {
	s.exec.Lock()
	exports := false
	for _, d := range s.devs {
		if d != nil {
			_, exports = d.ctx.(backend.MemoryExporter)
			break
		}
	}
	s.exec.Unlock()
	if !exports || os.Getenv(HandoverEnv) == "0" {
		return nil, nil
	}
	name := "@gpucloud-handover-" + hex.EncodeToString(newSecret()[:16])
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: name, Net: "unixpacket"})
	if err != nil {
		s.log.Info("migration: no socket to hand memory over on; copying", "err", err)
		return nil, nil
	}
	offer := memoryOffer{Socket: name, Secret: newSecret(), Devices: deviceUUIDs(s.b, s.cfg.Devices)}
	h := &handoverSource{ln: ln, ready: make(chan struct{})}
	go h.accept(offer.Secret)
	if err := iw.offer(&offer); err == nil {
		err = iw.flush()
	}
	if err != nil {
		h.wait(0)
		return nil, fmt.Errorf("sending to the new server: %w", err)
	}
	return h, nil
}

// accept takes the first connection that presents the secret.
func (h *handoverSource) accept(secret []byte) {
	for {
		c, err := h.ln.AcceptUnix()
		if err != nil {
			return
		}
		got := make([]byte, len(secret))
		c.SetReadDeadline(time.Now().Add(handoverWait))
		_, err = io.ReadFull(c, got)
		c.SetReadDeadline(time.Time{})
		if err != nil || subtle.ConstantTimeCompare(got, secret) != 1 {
			c.Close()
			continue
		}
		h.mu.Lock()
		if h.gaveUp {
			c.Close()
		} else {
			h.conn = c
			close(h.ready)
		}
		h.mu.Unlock()
		return
	}
}

// taken says whether the new worker has taken the offer (without waiting).
func (h *handoverSource) taken() bool {
	select {
	case <-h.ready:
		return true
	default:
		return false
	}
}

// wait is the new worker's connection, or nil if it did not take the offer within d; the
// socket is closed either way.
func (h *handoverSource) wait(d time.Duration) *net.UnixConn {
	select {
	case <-h.ready:
	case <-time.After(d):
	}
	h.ln.Close()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gaveUp = true
	return h.conn
}

// sendMemory passes device dev's mappings on c, up to maxHandoverFDs a message: u32 device, u32
// count, then count (u64 address, u64 bytes), the descriptors in the same order.
func sendMemory(c *net.UnixConn, dev int, maps []backend.SharedMapping) error {
	for len(maps) > 0 {
		n := min(len(maps), maxHandoverFDs)
		msg := binary.LittleEndian.AppendUint32(nil, uint32(dev))
		msg = binary.LittleEndian.AppendUint32(msg, uint32(n))
		fds := make([]int, n)
		for i, m := range maps[:n] {
			msg = binary.LittleEndian.AppendUint64(msg, m.Addr)
			msg = binary.LittleEndian.AppendUint64(msg, m.Bytes)
			fds[i] = int(m.File.Fd())
		}
		if _, _, err := c.WriteMsgUnix(msg, syscall.UnixRights(fds...), nil); err != nil {
			return fmt.Errorf("handing memory over: %w", err)
		}
		maps = maps[n:]
	}
	return nil
}

func endMemory(c *net.UnixConn) error {
	msg := binary.LittleEndian.AppendUint32(nil, handoverEnd)
	_, err := c.Write(binary.LittleEndian.AppendUint32(msg, 0))
	return err
}
