// Package controlplane is hostd's client of the apiserver's agent API (api/agent.go): heartbeat
// and registration, the desired instances of this host, observed state, session token renewal,
// and VM usage records.
package controlplane

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"gpucloud/api"
)

// Client is what the reconciler needs from the control plane.
type Client interface {
	Heartbeat(ctx context.Context, r api.HostReport) (api.HostAck, error)
	DesiredInstances(ctx context.Context) (api.DesiredInstances, error)
	ReportInstance(ctx context.Context, id string, o api.InstanceObserved) error
	RenewToken(ctx context.Context, id string) (api.SessionToken, error)
	PushUsage(ctx context.Context, b api.UsageBatch) (api.UsageBatchResult, error)
	ReportMove(ctx context.Context, id string, r api.HostMoveReport) error
}

// StatusError is a non-2xx answer; Body holds the problem document, if any.
type StatusError struct {
	Method, Path string
	Code         int
	Body         string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("controlplane: %s %s: HTTP %d: %s", e.Method, e.Path, e.Code, e.Body)
}

// IsNotFound reports whether err is a 404 from the apiserver.
func IsNotFound(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Code == http.StatusNotFound
}

// HTTP is the Client over HTTP.
type HTTP struct {
	base       string
	credential string
	hc         *http.Client
}

// NewHTTP returns a client of the apiserver at baseURL, authenticating with the host credential.
func NewHTTP(baseURL, credential string) (*HTTP, error) {
	return NewHTTPClient(baseURL, credential, &http.Client{Timeout: 30 * time.Second})
}

// NewHTTPClient is NewHTTP over hc (e.g. one trusting a private CA: internal/tlsconf).
func NewHTTPClient(baseURL, credential string, hc *http.Client) (*HTTP, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("controlplane: apiserver URL %q: want http(s)://host[:port]", baseURL)
	}
	if credential == "" {
		return nil, errors.New("controlplane: host credential is empty")
	}
	return &HTTP{base: strings.TrimRight(baseURL, "/"), credential: credential, hc: hc}, nil
}

func (c *HTTP) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("controlplane: encode %s %s: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return fmt.Errorf("controlplane: %s %s: %w", method, path, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.credential)
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("controlplane: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return &StatusError{Method: method, Path: path, Code: resp.StatusCode, Body: strings.TrimSpace(string(b))}
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(out); err != nil {
		return fmt.Errorf("controlplane: decode answer to %s %s: %w", method, path, err)
	}
	return nil
}

// Heartbeat implements Client.
func (c *HTTP) Heartbeat(ctx context.Context, r api.HostReport) (api.HostAck, error) {
	var ack api.HostAck
	err := c.do(ctx, http.MethodPost, "/v1/agent/host/heartbeat", r, &ack)
	return ack, err
}

// DesiredInstances implements Client.
func (c *HTTP) DesiredInstances(ctx context.Context) (api.DesiredInstances, error) {
	var d api.DesiredInstances
	if err := c.do(ctx, http.MethodGet, "/v1/agent/host/instances", nil, &d); err != nil {
		return api.DesiredInstances{}, err
	}
	return d, nil
}

// ReportInstance implements Client.
func (c *HTTP) ReportInstance(ctx context.Context, id string, o api.InstanceObserved) error {
	return c.do(ctx, http.MethodPut, "/v1/agent/host/instances/"+url.PathEscape(id)+"/status", o, nil)
}

// RenewToken implements Client.
func (c *HTTP) RenewToken(ctx context.Context, id string) (api.SessionToken, error) {
	var t api.SessionToken
	err := c.do(ctx, http.MethodPost, "/v1/agent/host/instances/"+url.PathEscape(id)+"/token", nil, &t)
	return t, err
}

// PushUsage implements Client.
func (c *HTTP) PushUsage(ctx context.Context, b api.UsageBatch) (api.UsageBatchResult, error) {
	var r api.UsageBatchResult
	err := c.do(ctx, http.MethodPost, "/v1/agent/usage", b, &r)
	return r, err
}

// ReportMove implements Client: this host's word on a drain's move it is the source or target of.
func (c *HTTP) ReportMove(ctx context.Context, id string, r api.HostMoveReport) error {
	return c.do(ctx, http.MethodPut, "/v1/agent/host/moves/"+url.PathEscape(id), r, nil)
}
