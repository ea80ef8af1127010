package worker

import (
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/wire"
)

// A session's stream may outlive its connection (issue 18), when the connection is cut (reset,
// timed out) rather than closed by the guest: after ResumeOpen the worker counts
// the bytes it has received from the guest and sent to it after the handshake, and keeps the
// last resumeKeep bytes it sent. When the connection fails, the serving goroutine waits up to the
// granted window for a Resume (routed by the server like a lane), answers it with how much it has
// received, resends what the guest missed, and reads and writes on the new connection as if
// nothing happened: the frames above never see the break, so every call is answered once.

// MaxResumeWindow bounds the window a guest may ask for.
const MaxResumeWindow = 5 * time.Minute

// resumeKeep is how many sent bytes a worker keeps for a guest that reconnects: more than the
// socket buffers on both ends and the wire can hold (a few MiB each), so what the guest did not
// receive is always among them.
const resumeKeep = 32 << 20

// resumeMagic marks a Resume passed on the lane socket: no LaneHello payload starts with it (a
// LaneHello starts with the protocol version).
var resumeMagic = []byte{0xff, 0xff, 0xff, 0xff}

// ResumePayload is what the server passes on the lane socket for a connection that opened with
// Resume: the magic, then the Resume payload.
func ResumePayload(p []byte) []byte { return append(append([]byte(nil), resumeMagic...), p...) }

func isResume(p []byte) ([]byte, bool) {
	if len(p) >= len(resumeMagic) && string(p[:len(resumeMagic)]) == string(resumeMagic) {
		return p[len(resumeMagic):], true
	}
	return nil, false
}

// resumeConn is the session's stream over whichever connection the guest last resumed on.
type resumeConn struct {
	sessionID string
	mu        sync.Mutex
	conn      net.Conn
	closed    bool
	secret    []byte        // nil until ResumeOpen: no resume
	window    time.Duration // granted
	in, out   uint64        // bytes of the stream received and sent
	kept      []byte        // the last sent bytes, a ring indexed by out % len
	keptFrom  uint64        // out when the ring began
	incoming  chan resumeOffer
	done      chan struct{} // closed by Close: a wait for the guest ends
	// gone and back, when set, hear that the stream broke (at that time) and that the guest
	// resumed it: billing stops at the break unless the guest comes back (Stats.away).
	gone func(time.Time)
	back func()
}

// observe sets what hears the guest go and come back; called before the stream is served.
func (r *resumeConn) observe(gone func(time.Time), back func()) {
	r.gone, r.back = gone, back
}

type resumeOffer struct {
	conn io.ReadWriteCloser
	m    wire.Resume
}

func newResumeConn(c net.Conn, sessionID string) *resumeConn {
	return &resumeConn{conn: c, sessionID: sessionID, incoming: make(chan resumeOffer, 1), done: make(chan struct{})}
}

// open answers ResumeOpen: a fresh secret, and from now on the stream is counted and kept.
func (r *resumeConn) open(want uint32) *wire.ResumeOpenReply {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.secret != nil {
		return &wire.ResumeOpenReply{Result: int32(backend.ErrInvalidValue)}
	}
	r.secret = make([]byte, 32)
	rand.Read(r.secret)
	r.window = min(time.Duration(want)*time.Millisecond, MaxResumeWindow)
	r.kept = make([]byte, resumeKeep)
	r.keptFrom = r.out
	return &wire.ResumeOpenReply{WindowMs: uint32(r.window / time.Millisecond), Secret: r.secret}
}

func (r *resumeConn) current() net.Conn {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.conn
}

func (r *resumeConn) Read(p []byte) (int, error) {
	for {
		c := r.current()
		n, err := c.Read(p)
		r.mu.Lock()
		r.in += uint64(n)
		r.mu.Unlock()
		if n > 0 || err == nil {
			return n, nil
		}
		// An orderly close (EOF) is the guest going away: a guest process that exits closes its
		// socket so. A connection cut under it (a reset, a timeout) is what a guest resumes.
		if errors.Is(err, io.EOF) || !r.resume(c, err) {
			return 0, err
		}
	}
}

func (r *resumeConn) Write(p []byte) (int, error) {
	r.mu.Lock()
	if r.kept != nil {
		for rest, at := p, r.out; len(rest) > 0; {
			n := copy(r.kept[int(at%uint64(len(r.kept))):], rest)
			rest = rest[n:]
			at += uint64(n)
		}
	}
	r.out += uint64(len(p)) // counted from the start: the guest counts what it receives from the HelloReply on
	c := r.conn             // taken with the count: a splice after this resends p whole
	r.mu.Unlock()
	if _, err := c.Write(p); err != nil && !r.resume(c, err) {
		return 0, err
	}
	return len(p), nil // on a resumed connection the kept bytes carried the rest
}

// resume waits for the guest to come back after err on failed; false: it did not (or resume is
// off). A connection already replaced since failed was used is the resumed one.
func (r *resumeConn) resume(failed net.Conn, err error) bool {
	r.mu.Lock()
	window, closed, replaced := r.window, r.closed, r.conn != failed
	r.mu.Unlock()
	if replaced && !closed {
		return true
	}
	if closed || window == 0 || errors.Is(err, os.ErrDeadlineExceeded) {
		return false
	}
	if r.gone != nil {
		r.gone(time.Now().UTC())
	}
	deadline := time.After(window)
	for {
		select {
		case <-deadline:
			return false
		case <-r.done:
			return false
		case o := <-r.incoming:
			if err := r.splice(o); err != nil {
				o.conn.Close()
				continue
			}
			if r.back != nil {
				r.back()
			}
			return true
		}
	}
}

// splice answers a Resume on its connection and makes it the stream's.
func (r *resumeConn) splice(o resumeOffer) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return net.ErrClosed
	}
	oldest := r.keptFrom
	if r.out > oldest+uint64(len(r.kept)) {
		oldest = r.out - uint64(len(r.kept))
	}
	if o.m.Received < oldest || o.m.Received > r.out {
		o.conn.Write(wire.AppendFrame(nil, &wire.ResumeReply{Result: int32(backend.ErrInvalidValue),
			Message: fmt.Sprintf("cannot resume from byte %d: the worker keeps %d..%d", o.m.Received, oldest, r.out)}, 0, 0))
		return errors.New("resume from a byte no longer kept")
	}
	if _, err := o.conn.Write(wire.AppendFrame(nil, &wire.ResumeReply{Received: r.in}, 0, 0)); err != nil {
		return err
	}
	for at := o.m.Received; at < r.out; {
		i := int(at % uint64(len(r.kept)))
		end := min(len(r.kept), i+int(r.out-at))
		if _, err := o.conn.Write(r.kept[i:end]); err != nil {
			return err
		}
		at += uint64(end - i)
	}
	r.conn.Close()
	nc, ok := o.conn.(net.Conn)
	if !ok {
		return errors.New("resumed connection is not a net.Conn")
	}
	r.conn = nc
	return nil
}

// offer hands a Resume's connection to the serving goroutine, after checking its secret; the
// old connection is shut so a read blocked on it wakes. A refusal is the lane refusal.
func (r *resumeConn) offer(conn io.ReadWriteCloser, payload []byte) error {
	var m wire.Resume
	err := m.Decode(payload)
	r.mu.Lock()
	secret := r.secret
	old := r.conn
	r.mu.Unlock()
	if err == nil && (m.Version != wire.Version || m.SessionID != r.sessionID || secret == nil ||
		subtle.ConstantTimeCompare(m.Secret, secret) != 1) {
		err = ErrLaneRefused
	}
	if err != nil {
		go func() {
			PauseLaneRefusal()
			conn.Write(wire.AppendFrame(nil, &wire.ResumeReply{Result: int32(backend.ResultOf(err)), Message: err.Error()}, 0, 0))
			conn.Close()
		}()
		return err
	}
	select {
	case r.incoming <- resumeOffer{conn: conn, m: m}:
		old.Close()
		return nil
	default:
		conn.Close()
		return errors.New("a resume is already waiting")
	}
}

func (r *resumeConn) Close() error {
	r.mu.Lock()
	if !r.closed {
		close(r.done)
	}
	r.closed = true
	c := r.conn
	r.mu.Unlock()
	return c.Close()
}

func (r *resumeConn) LocalAddr() net.Addr                { return nil }
func (r *resumeConn) RemoteAddr() net.Addr               { return nil }
func (r *resumeConn) SetDeadline(t time.Time) error      { return r.current().SetDeadline(t) }
func (r *resumeConn) SetReadDeadline(t time.Time) error  { return r.current().SetReadDeadline(t) }
func (r *resumeConn) SetWriteDeadline(t time.Time) error { return r.current().SetWriteDeadline(t) }

// state is what a session image keeps of the stream: the counts and the guest's grant.
func (r *resumeConn) state() (in, out uint64, secret []byte, windowMs uint32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.in, r.out, append([]byte(nil), r.secret...), uint32(r.window / time.Millisecond)
}

// errAwaitingGuest is the placeholder connection's answer: a restored session's stream has no
// connection until the guest resumes on it.
var errAwaitingGuest = errors.New("awaiting the guest's resume on this worker")

// awaitingConn stands for the guest's connection until it resumes.
type awaitingConn struct{ net.Conn }

func (awaitingConn) Read([]byte) (int, error)         { return 0, errAwaitingGuest }
func (awaitingConn) Write([]byte) (int, error)        { return 0, errAwaitingGuest }
func (awaitingConn) Close() error                     { return nil }
func (awaitingConn) SetDeadline(time.Time) error      { return nil }
func (awaitingConn) SetReadDeadline(time.Time) error  { return nil }
func (awaitingConn) SetWriteDeadline(time.Time) error { return nil }

// newRestoredResumeConn is the stream of a restored session: counts where the image left them,
// nothing kept to resend (the guest received all the old worker sent), and no connection until
// the guest resumes with secret within window.
func newRestoredResumeConn(sessionID string, in, out uint64, secret []byte, window time.Duration) *resumeConn {
	r := newResumeConn(awaitingConn{}, sessionID)
	r.in, r.out, r.secret, r.window = in, out, secret, min(window, MaxResumeWindow)
	r.kept, r.keptFrom = make([]byte, resumeKeep), out
	return r
}

// newSecret is a fresh resume secret.
func newSecret() []byte {
	b := make([]byte, 32)
	rand.Read(b)
	return b
}

// received is how many bytes of the guest's stream the connections delivered.
func (r *resumeConn) received() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.in
}

// sent is how many bytes of the stream were written to the guest.
func (r *resumeConn) sent() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.out
}

// handOff ends resuming here (the session moved to another worker) and shuts the sending side,
// so the guest reads to the last frame and then sees the stream end.
func (r *resumeConn) handOff() {
	r.mu.Lock()
	r.window = 0
	c := r.conn
	r.mu.Unlock()
	if bc, ok := c.(*blockingConn); ok {
		syscall.Shutdown(bc.fd, syscall.SHUT_WR)
	}
}

func (r *resumeConn) secretCopy() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]byte(nil), r.secret...)
}

// guestGone notes that the guest went away at t and tells the server at once, so it bills no
// further until the guest is back.
func (s *Session) guestGone(t time.Time) {
	s.Stats.away(t)
	s.tellServer()
}

// guestBack notes that the guest resumed: the time it was away is billed with what follows.
func (s *Session) guestBack() {
	s.Stats.back()
	s.tellServer()
}

// tellServer sends the server a snapshot now (none where no server listens, as in tests).
func (s *Session) tellServer() {
	if s.notify != nil {
		s.notify()
	}
}
