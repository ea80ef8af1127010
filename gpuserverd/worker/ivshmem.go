package worker

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/ivshmem"
	"gpucloud/gpuserverd/wire"
)

// A VM on this host reaches its worker through an ivshmem channel (package ivshmem): the server
// has read the hello from the region's ring 0 and hands the worker the channel file instead of a
// socket. The worker maps its slot of it, registers that with the driver as pinned memory (the
// guest's pinned heap and staging chunks live in it, exactly as in a ShmOpen arena) and serves the
// session through the rings with the polling doorbell.

// ivshmemConn is the session's connection over a channel's rings.
type ivshmemConn struct {
	ch      *ivshmem.Channel
	in, out io.ReadWriter
	gen     uint32
	timeout time.Duration
	closed  atomic.Bool
	beat    uint64
	beatAt  time.Time
}

func newIvshmemConn(ch *ivshmem.Channel, timeout time.Duration) *ivshmemConn {
	if timeout <= 0 {
		timeout = ivshmem.PeerTimeout
	}
	c := &ivshmemConn{ch: ch, gen: ch.Generation(), timeout: timeout, beat: ch.ClientBeat(), beatAt: time.Now()}
	c.in = NewPollRing(ch.Mem, 0, c.alive)
	c.out = NewPollRing(ch.Mem, 1, c.alive)
	return c
}

// alive ends the session (io.EOF: a normal end) when the guest let the channel go or the server
// reset it, or once the guest's heartbeat has stood still for the timeout (its process was killed,
// or its VM stopped).
func (c *ivshmemConn) alive() error {
	if c.closed.Load() {
		return net.ErrClosed
	}
	if c.ch.Generation() != c.gen || c.ch.State() != ivshmem.StateClaimed {
		return io.EOF
	}
	if b := c.ch.ClientBeat(); b != c.beat {
		c.beat, c.beatAt = b, time.Now()
		return nil
	}
	if time.Since(c.beatAt) > c.timeout {
		return fmt.Errorf("the guest's heartbeat stood still for %v: %w", c.timeout, io.EOF)
	}
	return nil
}

func (c *ivshmemConn) Read(p []byte) (int, error)  { return c.in.Read(p) }
func (c *ivshmemConn) Write(p []byte) (int, error) { return c.out.Write(p) }

// Close stops the rings' waits at their next liveness check.
func (c *ivshmemConn) Close() error {
	c.closed.Store(true)
	return nil
}

func (c *ivshmemConn) LocalAddr() net.Addr                { return nil }
func (c *ivshmemConn) RemoteAddr() net.Addr               { return nil }
func (c *ivshmemConn) SetDeadline(t time.Time) error      { return nil }
func (c *ivshmemConn) SetReadDeadline(t time.Time) error  { return nil }
func (c *ivshmemConn) SetWriteDeadline(t time.Time) error { return nil }

// adoptIvshmem makes the channel's region the session's arena, registered with the driver as
// pinned memory. On failure the guest is told why in its HelloReply.
func (s *Session) adoptIvshmem(ch *ivshmem.Channel) error {
	if h, err := ivshmem.ParseHeader(ch.Mem); err != nil {
		return s.refuseHello(backend.ErrInvalidValue, err)
	} else if int(h.Index) != ch.Index || int(h.Slots) != ch.Count {
		return s.refuseHello(backend.ErrInvalidValue, fmt.Errorf("ivshmem: slot header says slot %d of %d, the worker was given %d of %d", h.Index, h.Slots, ch.Index, ch.Count))
	}
	d, err := s.dev()
	if err != nil {
		return s.refuseHello(backend.ResultOf(err), fmt.Errorf("no device: %w", err))
	}
	if err := d.ctx.HostRegister(ch.Mem); err != nil {
		return s.refuseHello(backend.ResultOf(err), fmt.Errorf("registering the ivshmem region with the driver: %w", err))
	}
	s.shm = &arena{mem: ch.Mem, reg: d.ctx}
	s.log.Info("ivshmem channel open", "path", ch.Path, "slot", ch.Index, "slots", ch.Count, "bytes", len(ch.Mem))
	return nil
}

func (s *Session) refuseHello(code backend.Result, err error) error {
	msg := truncate(err.Error(), 1024)
	_ = s.reply(0, &wire.HelloReply{Result: int32(code), Version: wire.Version, Message: msg}, 0)
	return errors.Join(errors.New("worker: refusing the ivshmem session"), err)
}
