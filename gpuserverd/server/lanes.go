package server

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"syscall"
	"time"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/wire"
	"gpucloud/gpuserverd/worker"
)

// laneSocket makes the Unix socket pair on which lane connections are passed to a worker: the
// server keeps the first end, the worker inherits the second as worker.LanesFD.
func laneSocket() (*net.UnixConn, *os.File, error) { return seqpacketPair("lanes") }

// attachLane hands a connection that opened with LaneHello to its session's worker, which checks
// the key and answers on the lane. The server only routes: it knows session ids, not keys.
// Among sessions sharing the id (an instance's several processes), the one whose worker reported
// the key's name (worker.ResumeKeyOf) gets it; the worker reports it as it answers LanesOpen, so
// the lane waits a moment for that report rather than go to a sibling that would refuse it.
func (s *Server) attachLane(conn net.Conn, payload []byte, log *slog.Logger) {
	var h wire.LaneHello
	err := h.Decode(payload)
	issued := reported(worker.ResumeKeyOf(h.Key), func(sn *worker.Snapshot) string { return sn.LaneKey })
	if err == nil {
		s.awaitSession(h.SessionID, issued, laneKeyWait)
	}
	s.routeTo(conn, h.SessionID, issued, payload, err, func(st *wire.Status) wire.Message { return st }, log)
}

// reported picks the session whose worker's last snapshot names key in the field that keyOf reads.
func reported(key string, keyOf func(*worker.Snapshot) string) func(*session) bool {
	return func(se *session) bool {
		se.mu.Lock()
		defer se.mu.Unlock()
		return keyOf(&se.last) == key
	}
}

// laneKeyWait bounds how long a lane or a resume waits for its worker's report of the key. One no
// worker issued waits it out as well, whether or not its session exists: no oracle of live
// sessions.
const laneKeyWait = 250 * time.Millisecond

// awaitSession waits until a session of id sid satisfies ok, or for d.
func (s *Server) awaitSession(sid string, ok func(*session) bool, d time.Duration) {
	for deadline, first := time.Now().Add(d), true; time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		s.mu.Lock()
		found := false
		for _, x := range s.sessions {
			if x.claims.SessionID == sid && ok(x) {
				found = true
				break
			}
		}
		s.mu.Unlock()
		if found {
			return
		}
		if first && s.keyAwaited != nil {
			s.keyAwaited(sid)
		}
		first = false
	}
}

// attachResume hands a connection that opened with Resume to its session's worker, which checks
// the secret and goes on with the session's stream on it (worker/resume.go).
// Among sessions sharing the id (an instance's several processes), the one whose worker reported
// the secret's key (worker.ResumeKeyOf) gets it; the resume waits a moment for that report, as a
// lane does: a session that moved here may report its key only after its old server redirected the
// guest, and a sibling given the resume meanwhile would refuse it, ending the guest's session.
func (s *Server) attachResume(conn net.Conn, payload []byte, log *slog.Logger) {
	var m wire.Resume
	err := m.Decode(payload)
	keyed := reported(worker.ResumeKeyOf(m.Secret), func(sn *worker.Snapshot) string { return sn.ResumeKey })
	if err == nil {
		s.awaitSession(m.SessionID, keyed, laneKeyWait)
	}
	s.routeTo(conn, m.SessionID, keyed, worker.ResumePayload(payload), err, func(st *wire.Status) wire.Message {
		return &wire.ResumeReply{Result: st.Result, Message: st.Message}
	}, log)
}

// route passes conn and payload to session sid's worker on its lane socket; err is the opening
// frame's decoding error. A refusal, for a session this server does not run as for a malformed
// frame, is the one a wrong key gets, after the same pause: no oracle of live sessions.
func (s *Server) route(conn net.Conn, sid string, payload []byte, err error, refusal func(*wire.Status) wire.Message, log *slog.Logger) {
	s.routeTo(conn, sid, nil, payload, err, refusal, log)
}

// routeTo is route preferring, among the sessions of id sid, one that prefer picks.
func (s *Server) routeTo(conn net.Conn, sid string, prefer func(*session) bool, payload []byte, err error,
	refusal func(*wire.Status) wire.Message, log *slog.Logger) {
	var se *session
	if err == nil {
		s.mu.Lock()
		for _, x := range s.sessions {
			if x.claims.SessionID == sid && x.lanes != nil && !x.handedOff() && (se == nil || prefer != nil && prefer(x)) {
				se = x
			}
		}
		parked := se == nil && s.parkedWait(sid)
		s.mu.Unlock()
		if parked {
			conn.Close() // no answer: the guest tries again, and finds the restored worker
			return
		}
		if se == nil {
			err = worker.ErrLaneRefused
		}
	}
	if err == nil {
		err = passConn(se.lanes, conn, payload)
	}
	if err != nil {
		log.Info("lane or resume refused", "err", err)
		worker.PauseLaneRefusal()
		st := &wire.Status{Result: int32(backend.ResultOf(err)), Message: truncate(err.Error(), 1024)}
		if backend.ResultOf(err) == backend.ErrUnknown {
			st.Result = int32(backend.ErrInvalidValue) // a malformed opening frame
		}
		conn.Write(wire.AppendFrame(nil, refusal(st), 0, 0))
	}
}

// passConn sends conn's descriptor and the LaneHello payload over the worker's lane socket.
func passConn(uc *net.UnixConn, conn net.Conn, payload []byte) error {
	sock, ok := conn.(interface{ File() (*os.File, error) }) // TCP, or Unix without an arena
	if !ok {
		return fmt.Errorf("lane connection is %T, not a socket", conn)
	}
	f, err := sock.File()
	if err != nil {
		return fmt.Errorf("lane fd: %w", err)
	}
	defer f.Close()
	if _, _, err := uc.WriteMsgUnix(payload, syscall.UnixRights(int(f.Fd())), nil); err != nil {
		return fmt.Errorf("passing lane to worker: %w", err)
	}
	return nil
}
