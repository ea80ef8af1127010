package server

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"gpucloud/gpuserverd/backend/sim"
	"gpucloud/gpuserverd/wire"
	"gpucloud/gpuserverd/worker"
	"gpucloud/internal/sessiontoken"
)

func nvmlToken(t *testing.T, priv ed25519.PrivateKey, instance, tier string, quota uint64, gpus ...string) string {
	t.Helper()
	now := time.Now()
	tok, err := sessiontoken.Sign(priv, sessiontoken.Claims{SessionID: "s-" + instance, TenantID: "t-" + instance,
		InstanceID: instance, GPUServer: "gs1", GPUs: gpus, Tier: tier, MemoryQuota: quota,
		IssuedAt: now.Unix(), ExpiresAt: now.Add(time.Minute).Unix()})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// nvmlConn opens a monitoring connection to s with token and returns the hello's reply and the
// guest's end (nil when refused).
func nvmlConn(t *testing.T, s *Server, token string) (wire.NvmlHelloReply, net.Conn) {
	t.Helper()
	guest, srv := net.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.handle(ctx, srv, func() {}) }()
	t.Cleanup(func() { cancel(); guest.Close(); <-done })
	guest.SetDeadline(time.Now().Add(5 * time.Second))
	go guest.Write(wire.AppendFrame(nil, &wire.NvmlHello{Version: wire.Version, Token: token}, 0, 1))
	var hr wire.NvmlHelloReply
	nvmlRead(t, guest, &hr)
	if hr.Result != 0 {
		return hr, nil
	}
	return hr, guest
}

func nvmlRead(t *testing.T, c net.Conn, m wire.Message) {
	t.Helper()
	h, p, err := wire.ReadFrame(c, nil)
	if err != nil || h.Type != m.Type() {
		t.Fatalf("reading %T: %v %v", m, h.Type, err)
	}
	if err := m.Decode(p); err != nil {
		t.Fatal(err)
	}
}

func nvmlAsk(t *testing.T, c net.Conn, req, reply wire.Message) {
	t.Helper()
	if _, err := c.Write(wire.AppendFrame(nil, req, 0, 7)); err != nil {
		t.Fatal(err)
	}
	nvmlRead(t, c, reply)
}

// TestNVMLConnectionIsNoSession: a monitoring connection starts no worker, takes no GPU from
// admission (a dedicated session is still admitted beside it) and answers by tier: the shared
// tier its quota and no whole-GPU readings, the dedicated tier the GPU with them.
func TestNVMLConnectionIsNoSession(t *testing.T) {
	s, priv := newServer(t) // its worker command is /bin/false: a worker could not serve
	hr, shared := nvmlConn(t, s, nvmlToken(t, priv, "i-shared", sessiontoken.TierShared, 64<<20, sim.UUID(1)))
	if shared == nil || hr.DeviceCount != 1 || hr.Tier != "shared" || hr.Simulated != 1 {
		t.Fatalf("hello: %+v", hr)
	}
	var d wire.NvmlDeviceReply
	nvmlAsk(t, shared, &wire.NvmlDevice{Index: 0}, &d)
	if d.Result != 0 || d.UUID != sim.UUID(1) || d.MemoryTotal != 64<<20 || d.Supported != 0 {
		t.Fatalf("shared device: %+v", d)
	}
	nvmlAsk(t, shared, &wire.NvmlDevice{Index: 1}, &d)
	if d.Result != nvmlInvalidArgument {
		t.Fatalf("a GPU the token does not grant: %+v", d)
	}
	if len(s.sessions) != 0 || len(s.gpus) != 0 {
		t.Fatalf("a monitoring connection became a session: %v %v", s.sessions, s.gpus)
	}
	if err := s.admit(sessiontoken.Claims{Tier: sessiontoken.TierDedicated, GPUs: []string{sim.UUID(1)}}); err != nil {
		t.Fatalf("dedicated session beside a monitoring connection: %v", err)
	}
	_, dedicated := nvmlConn(t, s, nvmlToken(t, priv, "i-ded", sessiontoken.TierDedicated, 0, sim.UUID(0)))
	nvmlAsk(t, dedicated, &wire.NvmlDevice{Index: 0}, &d)
	want := uint32(wire.NvmlUtil | wire.NvmlClocks | wire.NvmlTemperature | wire.NvmlPower | wire.NvmlPstate)
	if d.Result != 0 || d.MemoryTotal != 1<<30 || d.Supported != want || len(d.Clocks) != 8 {
		t.Fatalf("dedicated device: %+v (supported want %#x)", d, want)
	}
}

// TestNVMLRefusals: a bad token or a GPU this server lacks gets a reply saying so; a malformed
// request ends the connection with a ProtocolError.
func TestNVMLRefusals(t *testing.T) {
	s, priv := newServer(t)
	_, otherKey, _ := ed25519.GenerateKey(nil)
	if hr, c := nvmlConn(t, s, nvmlToken(t, otherKey, "i", sessiontoken.TierShared, 1<<20, sim.UUID(0))); c != nil || hr.Result != nvmlNoPermission {
		t.Fatalf("foreign token: %+v", hr)
	}
	if hr, c := nvmlConn(t, s, nvmlToken(t, priv, "i", sessiontoken.TierShared, 1<<20, "GPU-nope")); c != nil || hr.Result != nvmlGPUNotFound {
		t.Fatalf("unknown GPU: %+v", hr)
	}
	_, c := nvmlConn(t, s, nvmlToken(t, priv, "i", sessiontoken.TierShared, 1<<20, sim.UUID(0)))
	go c.Write(wire.AppendFrame(nil, &wire.MemAlloc{Bytes: 1}, 0, 2))
	var pe wire.ProtocolError
	nvmlRead(t, c, &pe)
	if pe.Message != "wire: bad message: MemAlloc on an NVML connection" {
		t.Fatalf("refusal %q", pe.Message)
	}
}

// TestNVMLProcessesAreTheInstancesOwn: another instance's sessions on the same GPU are neither
// listed nor counted in the shared tier's memory used.
func TestNVMLProcessesAreTheInstancesOwn(t *testing.T) {
	s, priv := newServer(t)
	now := time.Now()
	for pid, inst := range map[int]string{10: "mine", 11: "other", 12: "mine"} {
		se := &session{claims: sessiontoken.Claims{InstanceID: inst, GPUs: []string{sim.UUID(0)}}, pid: pid,
			start: now.Add(time.Duration(pid) * time.Millisecond)}
		se.last = worker.Snapshot{DeviceBytes: map[int]uint64{0: uint64(pid) << 20}, GuestPID: uint32(100 + pid)}
		s.sessions[pid] = se
	}
	_, c := nvmlConn(t, s, nvmlToken(t, priv, "mine", sessiontoken.TierShared, 1<<30, sim.UUID(0)))
	var p wire.NvmlProcessesReply
	nvmlAsk(t, c, &wire.NvmlProcesses{Index: 0}, &p)
	if p.Result != 0 || len(p.Pids) != 2 || p.Pids[0] != 110 || p.Pids[1] != 112 || len(p.Memory) != 16 ||
		binary.LittleEndian.Uint64(p.Memory) != 10<<20 || binary.LittleEndian.Uint64(p.Memory[8:]) != 12<<20 {
		t.Fatalf("processes: %+v", p)
	}
	var d wire.NvmlDeviceReply
	nvmlAsk(t, c, &wire.NvmlDevice{Index: 0}, &d)
	if d.MemoryUsed != 22<<20 {
		t.Fatalf("shared memory used %d, want the instance's 22 MiB", d.MemoryUsed)
	}
}

// TestNVMLMonitorsPerInstanceBounded: an instance cannot open monitoring connections without end.
func TestNVMLMonitorsPerInstanceBounded(t *testing.T) {
	s, priv := newServer(t)
	tok := nvmlToken(t, priv, "greedy", sessiontoken.TierShared, 1<<20, sim.UUID(0))
	for i := 0; i < maxMonitorsPerInstance; i++ {
		if _, c := nvmlConn(t, s, tok); c == nil {
			t.Fatalf("connection %d refused", i)
		}
	}
	if hr, c := nvmlConn(t, s, tok); c != nil || hr.Result != nvmlInsufficientResource {
		t.Fatalf("connection past the bound: %+v", hr)
	}
	if _, c := nvmlConn(t, s, nvmlToken(t, priv, "modest", sessiontoken.TierShared, 1<<20, sim.UUID(0))); c == nil {
		t.Fatal("another instance refused for the first one's connections")
	}
}

// FuzzNVMLAnswer: any request payload is answered or refused with an error, never a panic, and
// an answer about a GPU is about one the token grants.
func FuzzNVMLAnswer(f *testing.F) {
	f.Add(uint16(wire.TypeNvmlDevice), wire.AppendFrame(nil, &wire.NvmlDevice{Index: 0}, 0, 0)[wire.HeaderSize:])
	f.Add(uint16(wire.TypeNvmlProcesses), []byte{1, 0, 0, 0})
	f.Add(uint16(wire.TypeNvmlHello), []byte{})
	f.Add(uint16(0), wire.AppendFrame(nil, &wire.NvmlProcesses{Index: 3}, 0, 9))
	pub, _, _ := ed25519.GenerateKey(nil)
	s, err := New(Config{ServerID: "gs1", PublicKey: pub, WorkerCommand: []string{"/bin/false"},
		DataDir: f.TempDir(), BackendKind: sim.Kind}, sim.New(2, 1<<30))
	if err != nil {
		f.Fatal(err)
	}
	c := sessiontoken.Claims{InstanceID: "i", GPUs: []string{sim.UUID(1)}, Tier: sessiontoken.TierShared, MemoryQuota: 1 << 20}
	f.Fuzz(func(t *testing.T, typ uint16, p []byte) {
		// The same bytes as a request frame off the connection: bounded, of an NVML type, or refused.
		if h, body, err := readNVMLRequest(bytes.NewReader(p)); err == nil &&
			(len(body) > maxMonitorFrame || (h.Type != wire.TypeNvmlDevice && h.Type != wire.TypeNvmlProcesses)) {
			t.Fatalf("accepted %s of %d bytes", h.Type, len(body))
		}
		m, err := s.nvmlAnswer(c, wire.Type(typ), p)
		if err != nil {
			return
		}
		if d, ok := m.(*wire.NvmlDeviceReply); ok && d.Result == 0 && d.UUID != sim.UUID(1) {
			t.Fatalf("answered about %s", d.UUID)
		}
		if _, _, err := s.nvmlHello(p); err == nil {
			t.Fatalf("unsigned hello accepted: %x", p)
		}
	})
}
