package worker

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/wire"
)

// The server asks its workers for checkpoints and migrations on the lane socket (adopt.go keeps
// the socket across server restarts): a message that starts with controlMagic, then a Control
// as JSON, with one descriptor: the file the checkpoint goes to, or the connection to the
// target server (MigrateIn already accepted). The outcome comes back in the worker's snapshots.

// controlMagic marks a Control on the lane socket: no LaneHello (a protocol version first) and
// no Resume (resumeMagic) starts with it.
var controlMagic = []byte{0xfe, 0xfe, 0xfe, 0xfe}

// Control is a request of the server's.
type Control struct {
	ID int64 `json:"id"`
	// Op is "checkpoint" (the descriptor is a file to write the image to; the session goes on)
	// or "migrate" (a connection to the target server's worker; Address is where the guest
	// reaches the target).
	Op      string `json:"op"`
	Address string `json:"address,omitempty"`
	// Stop, with "checkpoint", ends the session here once its image is written: it is to be
	// restored (POST /admin/restore), and the guest resumes on the restored worker.
	Stop bool `json:"stop,omitempty"`
	// Stream, with "migrate", copies the memory through the connection even where the target
	// could take it over on the same GPU (handover.go): for measuring the copy.
	Stream bool `json:"stream,omitempty"`
}

// ControlPayload is the lane-socket message carrying c.
func ControlPayload(c Control) []byte {
	b, _ := json.Marshal(c)
	return append(append([]byte(nil), controlMagic...), b...)
}

func isControl(p []byte) (Control, bool, error) {
	var c Control
	if len(p) < len(controlMagic) || string(p[:len(controlMagic)]) != string(controlMagic) {
		return c, false, nil
	}
	if err := json.Unmarshal(p[len(controlMagic):], &c); err != nil {
		return c, true, fmt.Errorf("control message: %w", err)
	}
	return c, true, nil
}

// ControlResult is a finished control request's outcome, in the snapshots.
type ControlResult struct {
	ID    int64  `json:"id"`
	Op    string `json:"op"`
	Error string `json:"error,omitempty"`
	// NotMovable: the session cannot move or be checkpointed as it is (ErrNotMovable), as
	// opposed to a failure on the way; the admin API answers 409 for it, not 502.
	NotMovable bool    `json:"not_movable,omitempty"`
	Ms         float64 `json:"ms"`
}

// control runs c with its descriptor fd.
func (s *Session) control(c Control, fd int) {
	start := time.Now()
	var err error
	switch c.Op {
	case "checkpoint":
		f := os.NewFile(uintptr(fd), "checkpoint")
		s.exec.Lock()
		err = s.Checkpoint(f)
		if err == nil {
			err = f.Sync()
		}
		if err == nil && c.Stop {
			if s.resume == nil || len(s.resume.secretCopy()) == 0 {
				err = fmt.Errorf("%w: a session whose guest cannot resume (no resumable stream, or resume off) cannot be stopped for a restore", ErrNotMovable)
			} else {
				s.stopAfterCheckpoint()
			}
		}
		s.exec.Unlock()
		f.Close()
	case "migrate":
		f := os.NewFile(uintptr(fd), "migration")
		var conn net.Conn
		conn, err = net.FileConn(f)
		f.Close()
		if err == nil {
			err = s.Migrate(conn, c.Address, c.Stream)
			conn.Close()
		}
	default:
		syscall.Close(fd)
		err = fmt.Errorf("unknown control op %q", c.Op)
	}
	if err != nil {
		s.log.Warn("control request failed", "op", c.Op, "err", err)
	}
	r := ControlResult{ID: c.ID, Op: c.Op, Ms: float64(time.Since(start).Microseconds()) / 1000}
	if err != nil {
		r.Error, r.NotMovable = err.Error(), errors.Is(err, ErrNotMovable)
	}
	s.Stats.setControl(r)
	s.tellServer()
}

// writeReady answers the migrating worker with MigrateReady: secret, or why the session could
// not be taken.
func writeReady(c net.Conn, secret []byte, err error) {
	m := &wire.MigrateReady{Secret: secret}
	if err != nil {
		m = &wire.MigrateReady{Result: int32(backend.ResultOf(err)), Message: truncate(err.Error(), 1024)}
	}
	c.Write(wire.AppendFrame(nil, m, 0, 0))
}
