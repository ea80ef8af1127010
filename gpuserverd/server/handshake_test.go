package server

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/backend/sim"
	"gpucloud/gpuserverd/wire"
	"gpucloud/internal/sessiontoken"
)

// handshakeWith sends frame to the server's handshake and returns what it decided.
func handshakeWith(t *testing.T, s *Server, frame []byte) (sessiontoken.Claims, []int, error) {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	b.SetDeadline(time.Now().Add(5 * time.Second))
	go a.Write(frame)
	return s.handshake(b)
}

func TestHandshakeRefusals(t *testing.T) {
	s, priv := newServer(t)
	now := time.Now()
	good, _ := sessiontoken.Sign(priv, sessiontoken.Claims{SessionID: "s", TenantID: "t", InstanceID: "i",
		GPUServer: "gs1", GPUs: []string{sim.UUID(1)}, Tier: sessiontoken.TierShared, MemoryQuota: 1 << 20,
		IssuedAt: now.Unix(), ExpiresAt: now.Add(time.Minute).Unix()})
	cases := []struct {
		name  string
		frame []byte
		code  backend.Result
		want  string
	}{
		{"old version", wire.AppendFrame(nil, &wire.Hello{Version: 99, Token: good}, 0, 1), backend.ErrNotSupported, "protocol version 99 not supported"},
		{"not hello", wire.AppendFrame(nil, &wire.MemAlloc{Bytes: 1}, 0, 1), backend.ErrInvalidValue, "first message must be Hello, got MemAlloc"},
		{"bad hello", append(wire.AppendHeader(nil, wire.TypeHello, 0, 1, 2), 1, 2), backend.ErrInvalidValue, "Hello.version: truncated"},
		{"huge frame", wire.AppendHeader(nil, wire.TypeHello, 0, 1, wire.MaxFrame+1), backend.ErrInvalidValue, "exceeds limit"},
		// Before authentication a frame may claim no more than a Hello can be, whatever MaxFrame
		// allows later (issue 13, finding 1): refused from the header, nothing read or allocated.
		{"hello past its bound", wire.AppendHeader(nil, wire.TypeHello, 0, 1, wire.MaxFrame), backend.ErrInvalidValue, "Hello of 67108868 bytes exceeds 8192"},
		{"lane hello past its bound", wire.AppendHeader(nil, wire.TypeLaneHello, 0, 1, helloLimit+1), backend.ErrInvalidValue, "LaneHello of 8193 bytes exceeds 8192"},
	}
	for _, tc := range cases {
		_, _, err := handshakeWith(t, s, tc.frame)
		var r *refusal
		if !errors.As(err, &r) || r.code != tc.code || !strings.Contains(r.msg, tc.want) {
			t.Errorf("%s: got %v, want code %d and %q", tc.name, err, tc.code, tc.want)
		}
	}
	c, ords, err := handshakeWith(t, s, wire.AppendFrame(nil, &wire.Hello{Version: wire.Version, Token: good}, 0, 1))
	if err != nil || c.SessionID != "s" || len(ords) != 1 || ords[0] != 1 {
		t.Fatalf("good hello: %+v %v %v", c, ords, err)
	}
}
