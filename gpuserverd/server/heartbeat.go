package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"gpucloud/api"
	"gpucloud/gpuserverd/backend"
)

// Heartbeat configures the optional report to the apiserver (api/agent.go).
type Heartbeat struct {
	APIServer  string // base URL, e.g. https://api.example; "" turns heartbeats off
	Credential string // the GPU server's agent credential
	Endpoint   string // host:port guest libraries dial, as advertised
	Version    string
	Period     time.Duration // until the apiserver names one
	MaxPeriod  time.Duration // if set, heartbeat at least this often whatever the apiserver names
	// Inventory, when set, reads the GPUs from NVML (names, health); GPUs the backend does not
	// serve are left out. Where it is nil or fails, the backend's devices are reported healthy.
	Inventory func() ([]api.GPUInfo, error)
}

// Report is what this server tells the apiserver now.
func (s *Server) Report(hb Heartbeat) api.GPUServerReport {
	r := report(hb, s.b.Kind(), s.devices, s.log)
	r.ActiveSessions = s.ActiveSessions()
	if r.ActiveSessions == nil {
		r.ActiveSessions = []string{}
	}
	r.Moves = s.moves.reports()
	return r
}

func report(hb Heartbeat, kind string, devices []backend.Device, log *slog.Logger) api.GPUServerReport {
	host, _ := os.Hostname()
	r := api.GPUServerReport{Hostname: host, Endpoint: hb.Endpoint, Backend: kind, Version: hb.Version,
		ActiveSessions: []string{}}
	served := map[string]bool{}
	for _, d := range devices {
		served[d.UUID] = true
	}
	if hb.Inventory != nil {
		infos, err := hb.Inventory()
		if err == nil {
			for _, g := range infos {
				if served[g.UUID] { // the apiserver must only reserve GPUs sessions can use
					r.GPUs = append(r.GPUs, g)
				}
			}
			return r
		}
		log.Warn("NVML inventory failed; reporting the backend's devices", "err", err)
	}
	for _, d := range devices {
		r.GPUs = append(r.GPUs, api.GPUInfo{Index: d.Ordinal, UUID: d.UUID, Name: d.Name,
			MemoryBytes: d.TotalMemory, PCIBusID: d.PCIBusID, Healthy: true})
	}
	return r
}

// Join registers with the apiserver before serving: it sends heartbeats (retrying every few
// seconds until ctx ends) until one is acknowledged, and returns the ack, which names this GPU
// server's id and the session-token public key. A daemon configured with only its credential
// learns who it is this way.
func Join(ctx context.Context, hb Heartbeat, b backend.Backend, log *slog.Logger) (api.GPUServerAck, error) {
	devs, err := b.Devices()
	if err != nil {
		return api.GPUServerAck{}, fmt.Errorf("join: listing devices: %w", err)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	for wait := 200 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		ack, err := postHeartbeat(ctx, client, hb, report(hb, b.Kind(), devs, log))
		var se *StatusError
		if errors.As(err, &se) && (se.Code == http.StatusUnauthorized || se.Code == http.StatusForbidden) {
			// Retrying cannot fix a wrong or revoked credential: say so at once.
			return ack, fmt.Errorf("join: the apiserver refuses this GPU server's credential: %w", err)
		}
		if err == nil {
			if ack.GPUServerID == "" || ack.TokenPublicKey == "" {
				return ack, errors.New("join: the apiserver's ack names no GPU server id or token key")
			}
			return ack, nil
		}
		log.Warn("joining the apiserver failed; retrying", "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return ack, fmt.Errorf("join: %w (last error: %v)", ctx.Err(), err)
		case <-time.After(wait):
		}
	}
}

// RunHeartbeat reports to the apiserver until ctx ends, at the period the apiserver asks for.
func (s *Server) RunHeartbeat(ctx context.Context, hb Heartbeat) {
	period := hb.Period
	if period <= 0 {
		period = 30 * time.Second
	}
	client := &http.Client{Timeout: 10 * time.Second}
	s.moves.init()
	for {
		rep := s.Report(hb)
		ack, err := postHeartbeat(ctx, client, hb, rep)
		if err != nil {
			s.log.Warn("heartbeat to apiserver failed", "err", err)
		} else {
			if ack.HeartbeatPeriod > 0 {
				period = ack.HeartbeatPeriod
			}
			if hb.MaxPeriod > 0 {
				period = min(period, hb.MaxPeriod)
			}
			s.EndSessions(ctx, ack.EndSessions)
			s.startMoves(ctx, rep.Moves, ack.Moves)
			if ack.TokenPublicKey != "" && ack.TokenPublicKey != base64.StdEncoding.EncodeToString(s.cfg.PublicKey) {
				s.log.Warn("the apiserver's session-token key differs from --public-key; tokens it signs will be refused")
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(period):
		case <-s.moves.kick: // a move finished or progressed: tell the apiserver now
		}
	}
}

func postHeartbeat(ctx context.Context, client *http.Client, hb Heartbeat, rep api.GPUServerReport) (api.GPUServerAck, error) {
	var ack api.GPUServerAck
	err := postJSON(ctx, client, hb, "/v1/agent/gpu-server/heartbeat", rep, &ack)
	return ack, err
}

// StatusError is a non-200 answer of the apiserver.
type StatusError struct {
	Path, Status, Body string
	Code               int
}

func (e *StatusError) Error() string { return fmt.Sprintf("%s: %s: %s", e.Path, e.Status, e.Body) }

// postJSON sends in to the apiserver's agent API with the GPU server's credential and decodes
// a 200 answer into out; any other status is an error quoting the answer.
func postJSON(ctx context.Context, client *http.Client, hb Heartbeat, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("%s: encode: %w", path, err)
	}
	return postBody(ctx, client, hb, path, "application/json", body, out)
}

// postBody posts body of contentType to the agent API and decodes a 200 answer (JSON) into out.
func postBody(ctx context.Context, client *http.Client, hb Heartbeat, path, contentType string, body []byte, out any) error {
	return agentCall(ctx, client, hb, http.MethodPost, path, contentType, bytes.NewReader(body), out)
}

// agentCall makes one request of the agent API (body nil for none, else of contentType) and
// decodes a 200 answer.
func agentCall(ctx context.Context, client *http.Client, hb Heartbeat, method, path, contentType string, body io.Reader, out any) error {
	url := strings.TrimRight(hb.APIServer, "/") + path
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Authorization", "Bearer "+hb.Credential)
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if resp.StatusCode != http.StatusOK {
		return &StatusError{Path: path, Code: resp.StatusCode, Status: resp.Status, Body: string(bytes.TrimSpace(b))}
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s: answer: %w", path, err)
	}
	return nil
}
