package worker

import (
	"bytes"
	"log/slog"
	"net"
	"testing"
	"time"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/backend/sim"
	"gpucloud/gpuserverd/wire"
)

// BenchmarkServeLaunch is the worker's own cost of one asynchronous launch: reading the frame,
// decoding it, dispatching it and calling the backend, whose launch here does nothing (so the
// simulator's kernel goroutines are not measured). What a GPU adds is the driver's launch.
func BenchmarkServeLaunch(b *testing.B) {
	launch := &wire.LaunchKernel{Function: 1, GridX: 1, GridY: 1, GridZ: 1, BlockX: 1, BlockY: 1, BlockZ: 1,
		Stream: 0, Params: make([]byte, 8)}
	frames := bytes.Repeat(wire.AppendFrame(nil, launch, wire.FlagNoReply, 1), 1024)
	conn := &loopConn{data: frames}
	s := NewSession(Config{Devices: []int{0}}, nopLaunches{sim.New(1, 1<<30)}, conn, slog.New(slog.DiscardHandler))
	if _, err := s.dev(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := s.serveOne(); err != nil {
			b.Fatal(err)
		}
	}
}

// nopLaunches is the simulated backend whose contexts launch nothing.
type nopLaunches struct{ backend.Backend }

func (n nopLaunches) NewContext(ordinal int) (backend.Context, error) {
	c, err := n.Backend.NewContext(ordinal)
	return nopLaunchContext{c}, err
}

type nopLaunchContext struct{ backend.Context }

func (nopLaunchContext) LaunchKernel(backend.LaunchConfig) error { return nil }

// loopConn reads data over and over, as a guest sending the same frames without end.
type loopConn struct {
	data []byte
	off  int
}

func (c *loopConn) Read(p []byte) (int, error) {
	n := copy(p, c.data[c.off:])
	c.off = (c.off + n) % len(c.data)
	return n, nil
}

func (c *loopConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *loopConn) Close() error                     { return nil }
func (c *loopConn) LocalAddr() net.Addr              { return nil }
func (c *loopConn) RemoteAddr() net.Addr             { return nil }
func (c *loopConn) SetDeadline(time.Time) error      { return nil }
func (c *loopConn) SetReadDeadline(time.Time) error  { return nil }
func (c *loopConn) SetWriteDeadline(time.Time) error { return nil }
