package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"gpucloud/gpuserverd/inventory"
	"gpucloud/gpuserverd/wire"
	"gpucloud/internal/sessiontoken"
)

// Monitor is what the guests' NVML (libnvidia-ml.so.1 in a VM: nvidia-smi, pynvml) is answered
// from beyond the backend's device list (docs/nvml.md).
type Monitor struct {
	DriverVersion string // NVIDIA's driver version, e.g. "580.95.05"
	// Read takes a reading of the GPU with this UUID; nil: none (utilisation, clocks, temperature
	// and power are then not supported, and memory used is the sessions' own).
	Read func(uuid string) (inventory.Reading, error)
}

// NVML return codes (nvmlReturn_t) the server answers with.
const (
	nvmlSuccess              = 0
	nvmlInvalidArgument      = 2
	nvmlNotSupported         = 3
	nvmlNoPermission         = 4
	nvmlInsufficientResource = 23
	nvmlGPUNotFound          = 28
	nvmlUnknown              = 999
)

// maxMonitorsPerInstance bounds an instance's monitoring connections at once: each costs the
// server a goroutine and a socket, and nvidia-smi or a training loop needs one.
const maxMonitorsPerInstance = 16

// maxMonitorFrame bounds a monitoring request's payload: every request is a u32.
const maxMonitorFrame = 64

// monitor is one open monitoring connection.
type monitor struct {
	claims sessiontoken.Claims
	conn   net.Conn
}

// serveNVML runs a monitoring connection opened by NvmlHello (payload p): no worker, no GPU
// context, no session cap and no usage record; it answers from the inventory until the guest
// goes, the instance's sessions are ended or the server stops.
func (s *Server) serveNVML(ctx context.Context, conn net.Conn, p []byte, log *slog.Logger, authenticated func()) {
	c, code, err := s.nvmlHello(p)
	var m *monitor
	if err == nil {
		if m, err = s.addMonitor(c, conn); err != nil {
			code = nvmlInsufficientResource
		}
	}
	if err != nil {
		log.Warn("NVML connection refused", "err", err)
		conn.Write(wire.AppendFrame(nil, &wire.NvmlHelloReply{Result: code, Version: wire.Version,
			Message: truncate(err.Error(), 1024)}, 0, 0))
		return
	}
	defer s.dropMonitor(m)
	authenticated() // no longer a pending handshake (preauth.go)
	conn.SetDeadline(time.Time{})
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	log = log.With("session", c.SessionID, "instance", c.InstanceID)
	log.Info("NVML connection opened")
	cuda, _ := s.b.DriverVersion()
	reply := &wire.NvmlHelloReply{Version: wire.Version, Tier: c.Tier, DeviceCount: uint32(len(c.GPUs)),
		DriverVersion: truncate(s.monitor().DriverVersion, 80), CudaVersion: cuda}
	if s.b.Kind() == "simulated" {
		reply.Simulated = 1
	}
	if _, err := conn.Write(wire.AppendFrame(nil, reply, 0, 0)); err != nil {
		return
	}
	for {
		h, p, err := readNVMLRequest(conn)
		var answer wire.Message
		if err == nil {
			answer, err = s.nvmlAnswer(c, h.Type, p)
		}
		if errors.Is(err, wire.ErrDecode) {
			log.Warn("refusing malformed NVML frame", "err", err)
			conn.Write(wire.AppendFrame(nil, &wire.ProtocolError{Message: truncate(err.Error(), 1024)}, 0, h.Request))
			return
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				log.Info("NVML connection cut", "err", err)
			}
			return
		}
		if _, err := conn.Write(wire.AppendFrame(nil, answer, 0, h.Request)); err != nil {
			return
		}
	}
}

// readNVMLRequest reads one request of a monitoring connection: a small frame of an NVML type.
func readNVMLRequest(r io.Reader) (wire.Header, []byte, error) {
	var hb [wire.HeaderSize]byte
	if _, err := io.ReadFull(r, hb[:]); err != nil {
		return wire.Header{}, nil, err
	}
	h, err := wire.ParseHeader(hb[:])
	if err != nil {
		return h, nil, err
	}
	if h.Type != wire.TypeNvmlDevice && h.Type != wire.TypeNvmlProcesses {
		return h, nil, fmt.Errorf("%w: %s on an NVML connection", wire.ErrDecode, h.Type)
	}
	if h.Length > maxMonitorFrame {
		return h, nil, fmt.Errorf("%w: %s of %d bytes exceeds %d", wire.ErrDecode, h.Type, h.Length, maxMonitorFrame)
	}
	p := make([]byte, h.Length)
	_, err = io.ReadFull(r, p)
	return h, p, err
}

// nvmlHello verifies an NvmlHello's token; the GPUs it grants must be this server's. It admits
// nothing: a monitoring connection holds no GPU.
func (s *Server) nvmlHello(p []byte) (sessiontoken.Claims, int32, error) {
	var hello wire.NvmlHello
	if err := hello.Decode(p); err != nil {
		return sessiontoken.Claims{}, nvmlInvalidArgument, err
	}
	if hello.Version != wire.Version {
		return sessiontoken.Claims{}, nvmlNotSupported,
			fmt.Errorf("protocol version %d not supported; this server speaks %d", hello.Version, wire.Version)
	}
	c, _, err := s.checkToken(hello.Token) // a stopped or deleted instance monitors nothing either
	if err != nil {
		return c, nvmlNoPermission, err
	}
	if _, err := s.ordinals(c.GPUs); err != nil {
		return c, nvmlGPUNotFound, err
	}
	return c, nvmlSuccess, nil
}

// addMonitor registers a monitoring connection, within its instance's bound.
func (s *Server) addMonitor(c sessiontoken.Claims, conn net.Conn) (*monitor, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for m := range s.monitors {
		if m.claims.InstanceID == c.InstanceID {
			n++
		}
	}
	if n >= maxMonitorsPerInstance {
		return nil, fmt.Errorf("instance %s already has %d NVML connections open", c.InstanceID, n)
	}
	m := &monitor{claims: c, conn: conn}
	s.monitors[m] = struct{}{}
	return m, nil
}

func (s *Server) dropMonitor(m *monitor) {
	s.mu.Lock()
	delete(s.monitors, m)
	s.mu.Unlock()
}

// endMonitors closes the monitoring connections whose claims match (endWhere).
func (s *Server) endMonitors(match func(sessiontoken.Claims) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for m := range s.monitors {
		if match(m.claims) {
			m.conn.Close()
		}
	}
}

// monitor is the configured Monitor or, on the simulated backend, simulated readings.
func (s *Server) monitor() Monitor {
	if s.cfg.Monitor != nil {
		return *s.cfg.Monitor
	}
	if s.b.Kind() == "simulated" {
		return Monitor{DriverVersion: "simulated", Read: s.simulatedReading}
	}
	return Monitor{}
}
