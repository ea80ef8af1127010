package server

import (
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/backend/sim"
	"gpucloud/gpuserverd/wire"
	"gpucloud/gpuserverd/worker"
	"gpucloud/internal/sessiontoken"
)

// region is a channel region's control area with frame written into ring 0, as a guest would;
// head and tail may be set to anything, as a hostile guest may.
func region(frame []byte, head, tail uint32) []byte {
	mem := make([]byte, wire.ShmCtl)
	copy(mem[wire.ShmRing:2*wire.ShmRing], frame)
	binary.LittleEndian.PutUint32(mem[0:], head)
	binary.LittleEndian.PutUint32(mem[64:], tail)
	return mem
}

// ringHello reads the hello from ring 0 as serveClaim does, giving up after a short while.
func ringHello(mem []byte) (wire.Header, []byte, error) {
	deadline := time.Now().Add(100 * time.Millisecond)
	in := worker.NewPollRing(mem, 0, func() error {
		if time.Now().After(deadline) {
			return io.ErrUnexpectedEOF
		}
		return nil
	})
	return readHello(in)
}

func TestChannelHello(t *testing.T) {
	s, priv := newServer(t)
	now := time.Now()
	token := func(instance string) string {
		tok, _ := sessiontoken.Sign(priv, sessiontoken.Claims{SessionID: "s", TenantID: "t", InstanceID: instance,
			GPUServer: "gs1", GPUs: []string{sim.UUID(0)}, Tier: sessiontoken.TierShared, MemoryQuota: 1 << 20,
			IssuedAt: now.Unix(), ExpiresAt: now.Add(time.Minute).Unix()})
		return tok
	}
	hello := func(tok string) []byte {
		return wire.AppendFrame(nil, &wire.Hello{Version: wire.Version, Token: tok}, 0, 1)
	}
	big := wire.AppendHeader(nil, wire.TypeHello, 0, 1, helloLimit+1)
	for _, tc := range []struct {
		name  string
		frame []byte
		code  backend.Result
		want  string
	}{
		{"other instance", hello(token("inst-b")), backend.ErrNotPermitted, `session token is for instance "inst-b", not "inst-a"`},
		{"not hello", wire.AppendFrame(nil, &wire.MemAlloc{Bytes: 1}, 0, 1), backend.ErrInvalidValue, "first message must be Hello, got MemAlloc"},
		{"big hello", big, backend.ErrInvalidValue, "exceeds 8192"},
		{"bad token", hello("nonsense"), backend.ErrNotPermitted, "session token refused"},
	} {
		mem := region(tc.frame, uint32(len(tc.frame)), 0)
		_, _, err := s.channelHello(worker.NewPollRing(mem, 0, nil), "inst-a")
		var r *refusal
		if !errors.As(err, &r) || r.code != tc.code || !strings.Contains(r.msg, tc.want) {
			t.Errorf("%s: got %v, want code %d and %q", tc.name, err, tc.code, tc.want)
		}
	}
	// A refused other-instance hello must not hold the GPU: the rightful one is admitted after it.
	mem := region(hello(token("inst-a")), uint32(len(hello(token("inst-a")))), 0)
	c, ords, err := s.channelHello(worker.NewPollRing(mem, 0, nil), "inst-a")
	if err != nil || c.InstanceID != "inst-a" || len(ords) != 1 {
		t.Fatalf("good hello: %+v %v %v", c, ords, err)
	}
	s.release(c)
	// A hello that never completes ends when the ring's liveness check says so.
	if _, _, err := ringHello(region(hello(token("inst-a"))[:20], 20, 0)); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated hello: %v", err)
	}
}

// FuzzChannelHello: whatever a guest writes into ring 0, with whatever head and tail, reading
// the hello ends in a frame or an error, in bounded time, without a panic.
func FuzzChannelHello(f *testing.F) {
	f.Add(wire.AppendFrame(nil, &wire.Hello{Version: wire.Version, Token: "x"}, 0, 1), uint32(0), uint32(0))
	f.Add(wire.AppendHeader(nil, wire.TypeHello, 0, 1, 1<<30), uint32(0), uint32(0))
	f.Add([]byte{1, 2, 3}, uint32(1<<31), uint32(7))
	f.Fuzz(func(t *testing.T, frame []byte, headDelta, tail uint32) {
		if len(frame) > 1<<16 {
			return
		}
		head := tail + uint32(len(frame)) + headDelta%(2*wire.ShmRing)
		h, p, err := ringHello(region(frame, head, tail))
		if err == nil && (h.Type != wire.TypeHello || len(p) != int(h.Length) || h.Length > helloLimit) {
			t.Fatalf("accepted %v with %d bytes", h, len(p))
		}
	})
}
