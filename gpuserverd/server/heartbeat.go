package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"gpucloud/api"
)

// Heartbeat configures the optional report to the apiserver (api/agent.go).
type Heartbeat struct {
	APIServer  string // base URL, e.g. https://api.example; "" turns heartbeats off
	Credential string // the GPU server's agent credential
	Endpoint   string // host:port guest libraries dial, as advertised
	Version    string
	Period     time.Duration // until the apiserver names one
}

// Report is what this server tells the apiserver now.
func (s *Server) Report(hb Heartbeat) api.GPUServerReport {
	host, _ := os.Hostname()
	r := api.GPUServerReport{Hostname: host, Endpoint: hb.Endpoint, Backend: s.b.Kind(), Version: hb.Version,
		ActiveSessions: s.ActiveSessions()}
	if r.ActiveSessions == nil {
		r.ActiveSessions = []string{}
	}
	for _, d := range s.devices {
		r.GPUs = append(r.GPUs, api.GPUInfo{Index: d.Ordinal, UUID: d.UUID, Name: d.Name,
			MemoryBytes: d.TotalMemory, PCIBusID: d.PCIBusID, Healthy: true})
	}
	return r
}

// RunHeartbeat reports to the apiserver until ctx ends, at the period the apiserver asks for.
func (s *Server) RunHeartbeat(ctx context.Context, hb Heartbeat) {
	period := hb.Period
	if period <= 0 {
		period = 30 * time.Second
	}
	client := &http.Client{Timeout: 10 * time.Second}
	for {
		ack, err := s.heartbeat(ctx, client, hb)
		if err != nil {
			s.log.Warn("heartbeat to apiserver failed", "err", err)
		} else {
			if ack.HeartbeatPeriod > 0 {
				period = ack.HeartbeatPeriod
			}
			if ack.TokenPublicKey != "" && ack.TokenPublicKey != base64.StdEncoding.EncodeToString(s.cfg.PublicKey) {
				s.log.Warn("the apiserver's session-token key differs from --public-key; tokens it signs will be refused")
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(period):
		}
	}
}

func (s *Server) heartbeat(ctx context.Context, client *http.Client, hb Heartbeat) (api.GPUServerAck, error) {
	var ack api.GPUServerAck
	body, _ := json.Marshal(s.Report(hb))
	url := strings.TrimRight(hb.APIServer, "/") + "/v1/agent/gpu-server/heartbeat"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return ack, fmt.Errorf("heartbeat request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+hb.Credential)
	resp, err := client.Do(req)
	if err != nil {
		return ack, fmt.Errorf("heartbeat: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return ack, fmt.Errorf("heartbeat: %s: %s", resp.Status, bytes.TrimSpace(b))
	}
	if err := json.Unmarshal(b, &ack); err != nil {
		return ack, fmt.Errorf("heartbeat answer: %w", err)
	}
	return ack, nil
}
