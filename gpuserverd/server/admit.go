package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"time"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/wire"
	"gpucloud/internal/sessiontoken"
)

// CUDA_ERROR_DEVICE_UNAVAILABLE: what a refused second session on a dedicated GPU gets.
const errDeviceUnavailable backend.Result = 46

// gpuUse counts the sessions on one GPU, by tier; a dedicated GPU's sessions are all of one
// instance.
type gpuUse struct {
	dedicated bool
	instance  string
	sessions  int
}

// refusal is a handshake refused: the code and message the client gets.
type refusal struct {
	code   backend.Result
	reason string // metric label
	msg    string
}

func (r *refusal) Error() string { return r.msg }

// handle runs one connection: handshake, admission, worker. authenticated is called once the
// connection no longer counts as unauthenticated (handshake done or failed).
func (s *Server) handle(ctx context.Context, conn net.Conn, authenticated func()) {
	defer conn.Close()
	defer authenticated()
	remote := "local" // a Unix-socket client has no address
	if a := conn.RemoteAddr(); a != nil && a.Network() != "unix" {
		remote = a.String()
	}
	log := s.log.With("remote", remote)
	conn.SetDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
	h, p, err := readFirst(conn)
	if err == nil && h.Type == wire.TypeLaneHello {
		s.attachLane(conn, p, log)
		return
	}
	if err == nil && h.Type == wire.TypeNvmlHello {
		s.serveNVML(ctx, conn, p, log, authenticated)
		return
	}
	if err == nil && h.Type == wire.TypeResume {
		s.attachResume(conn, p, log)
		return
	}
	if err == nil && h.Type == wire.TypeMigrateIn {
		s.acceptMigration(ctx, conn, p, log, authenticated)
		return
	}
	var claims sessiontoken.Claims
	var ordinals []int
	if err == nil {
		claims, ordinals, err = s.hello(h, p)
	}
	if err != nil {
		if frame := s.refusalReply(err, log); frame != nil {
			conn.Write(frame)
		}
		return
	}
	authenticated()
	conn.SetDeadline(time.Time{})
	defer s.release(claims)
	s.count("")
	if err := s.runWorker(ctx, conn, claims, ordinals, log); err != nil {
		log.Error("worker", "session", claims.SessionID, "err", err)
	}
}

// refusalReply counts and logs a failed handshake and, when it was refused (not merely cut
// short), returns the HelloReply frame that tells the client why.
func (s *Server) refusalReply(err error, log *slog.Logger) []byte {
	var r *refusal
	if !errors.As(err, &r) {
		log.Info("handshake failed", "err", err)
		return nil
	}
	s.count(r.reason)
	log.Warn("session refused", "reason", r.reason, "err", r.msg)
	return wire.AppendFrame(nil, &wire.HelloReply{Result: int32(r.code), Version: wire.Version,
		Message: truncate(r.msg, 1024)}, 0, 0)
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func (s *Server) count(reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if reason == "" {
		s.metrics.accepted++
		return
	}
	s.metrics.refused++
	s.metrics.refusedBy[reason]++
}

// handshake reads Hello, verifies the token and admits the session, all before any GPU work.
func (s *Server) handshake(conn net.Conn) (sessiontoken.Claims, []int, error) {
	h, p, err := readFirst(conn)
	if err != nil {
		return sessiontoken.Claims{}, nil, err
	}
	return s.hello(h, p)
}

// readFirst reads a connection's first frame: Hello, LaneHello for a lane of a session, or
// NvmlHello for a monitoring connection (nvml.go). It is read before authentication, so its
// claimed length is held to helloLimit before anything is allocated for it.
func readFirst(conn net.Conn) (wire.Header, []byte, error) {
	return readOpening(conn, helloLimit, wire.TypeHello, wire.TypeLaneHello, wire.TypeNvmlHello, wire.TypeResume, wire.TypeMigrateIn)
}

// readOpening reads the frame that opens a connection or channel: one of types, its payload at
// most limit bytes.
func readOpening(r io.Reader, limit uint32, types ...wire.Type) (wire.Header, []byte, error) {
	var hb [wire.HeaderSize]byte
	if _, err := io.ReadFull(r, hb[:]); err != nil {
		return wire.Header{}, nil, fmt.Errorf("reading hello: %w", err)
	}
	h, err := wire.ParseHeader(hb[:])
	if err != nil {
		return h, nil, &refusal{backend.ErrInvalidValue, "protocol", err.Error()}
	}
	if !slices.Contains(types, h.Type) {
		return h, nil, &refusal{backend.ErrInvalidValue, "protocol", fmt.Sprintf("first message must be Hello, got %s", h.Type)}
	}
	if h.Length > limit {
		return h, nil, &refusal{backend.ErrInvalidValue, "protocol", fmt.Sprintf("%s of %d bytes exceeds %d", h.Type, h.Length, limit)}
	}
	p := make([]byte, h.Length)
	if _, err := io.ReadFull(r, p); err != nil {
		return h, nil, fmt.Errorf("reading hello: %w", err)
	}
	return h, p, nil
}

// checkToken verifies a session token (signature, this server as audience, expiry) and that its
// instance has not been revoked (revoke.go), for sessions and monitoring connections alike. A
// refusal comes with its metrics reason, "token" or "revoked".
func (s *Server) checkToken(token string) (sessiontoken.Claims, string, error) {
	c, err := sessiontoken.Verify(s.cfg.PublicKey, token, s.cfg.ServerID, time.Now())
	if err != nil {
		return c, "token", fmt.Errorf("session token refused: %w", err)
	}
	if s.denied.revoked(c) {
		return c, "revoked", fmt.Errorf("session token refused: instance %s was stopped or deleted", c.InstanceID)
	}
	return c, "", nil
}

// hello verifies a Hello's token and admits its session.
func (s *Server) hello(h wire.Header, p []byte) (sessiontoken.Claims, []int, error) {
	var c sessiontoken.Claims
	if h.Type != wire.TypeHello {
		return c, nil, &refusal{backend.ErrInvalidValue, "protocol", fmt.Sprintf("first message must be Hello, got %s", h.Type)}
	}
	var hello wire.Hello
	if err := hello.Decode(p); err != nil {
		return c, nil, &refusal{backend.ErrInvalidValue, "protocol", err.Error()}
	}
	if hello.Version != wire.Version {
		return c, nil, &refusal{backend.ErrNotSupported, "version",
			fmt.Sprintf("protocol version %d not supported; this server speaks %d", hello.Version, wire.Version)}
	}
	c, reason, err := s.checkToken(hello.Token)
	if err != nil {
		return c, nil, &refusal{backend.ErrNotPermitted, reason, err.Error()}
	}
	ordinals, err := s.ordinals(c.GPUs)
	if err != nil {
		return c, nil, err
	}
	return c, ordinals, s.admit(c)
}

// ordinals maps the token's GPU UUIDs to this server's device ordinals.
func (s *Server) ordinals(uuids []string) ([]int, error) {
	var out []int
	for _, u := range uuids {
		found := -1
		for _, d := range s.devices {
			if d.UUID == u {
				found = d.Ordinal
			}
		}
		if found < 0 {
			return nil, &refusal{backend.ErrNoDevice, "gpu", fmt.Sprintf("token grants GPU %s, which this server does not have", u)}
		}
		out = append(out, found)
	}
	return out, nil
}

// admit applies the tiers: a dedicated session takes its GPUs whole, for its instance (several
// processes in that VM, each a session through its own ivshmem slot or connection, share them as
// they would a GPU passed through); shared sessions share.
func (s *Server) admit(c sessiontoken.Claims) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.admitted.check(c.InstanceID, s.cfg.MaxSessions, s.cfg.MaxSessionsPerInstance); err != nil {
		return err
	}
	for _, u := range c.GPUs {
		use := s.gpus[u]
		if use == nil || use.sessions == 0 {
			continue
		}
		sameOwner := use.dedicated && c.Tier == sessiontoken.TierDedicated && c.InstanceID != "" && use.instance == c.InstanceID
		if (use.dedicated || c.Tier == sessiontoken.TierDedicated) && !sameOwner {
			return &refusal{errDeviceUnavailable, "busy",
				fmt.Sprintf("GPU %s is in use by another session and tier %s cannot share it", u, c.Tier)}
		}
	}
	s.countAdmitted(c)
	return nil
}

// countAdmitted counts an admitted session against the caps and on its GPUs; the caller holds
// s.mu.
func (s *Server) countAdmitted(c sessiontoken.Claims) {
	for _, u := range c.GPUs {
		use := s.gpus[u]
		if use == nil {
			use = &gpuUse{}
			s.gpus[u] = use
		}
		use.sessions++
		use.dedicated, use.instance = c.Tier == sessiontoken.TierDedicated, c.InstanceID
	}
	s.admitted.add(c.InstanceID, 1)
}

func (s *Server) release(c sessiontoken.Claims) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.admitted.add(c.InstanceID, -1)
	for _, u := range c.GPUs {
		if use := s.gpus[u]; use != nil {
			if use.sessions--; use.sessions <= 0 {
				delete(s.gpus, u)
			}
		}
	}
}
