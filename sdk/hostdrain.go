package sdk

import (
	"context"
	"time"
)

// HostMove is one VM a host's drain moves (or could not move: state unplaced, with the reason).
type HostMove struct {
	ID           string     `json:"id"`
	InstanceID   string     `json:"instance_id"`
	InstanceName string     `json:"instance_name"`
	TenantID     string     `json:"tenant_id"`
	SourceID     string     `json:"source_id"`
	TargetID     string     `json:"target_id,omitempty"`
	Mode         string     `json:"mode"`  // restart or live
	State        string     `json:"state"` // unplaced, pending, copying, done or failed
	Reason       string     `json:"reason,omitempty"`
	Note         string     `json:"note,omitempty"`
	BytesCopied  int64      `json:"bytes_copied"`
	BytesTotal   int64      `json:"bytes_total"`
	CreatedAt    time.Time  `json:"created_at"`
	UpdatedAt    time.Time  `json:"updated_at"`
	FinishedAt   *time.Time `json:"finished_at,omitempty"`
}

// HostDrain is a host's drain: each VM's newest move, and the instances still placed on it.
type HostDrain struct {
	HostID    string         `json:"host_id"`
	Draining  bool           `json:"draining"`
	Remaining int            `json:"remaining"`
	Counts    map[string]int `json:"counts"`
	Moves     []HostMove     `json:"moves"`
}

// Open counts the moves not finished yet (pending or copying).
func (d HostDrain) Open() int { return d.Counts["pending"] + d.Counts["copying"] }

// HostDrainOptions choose how a host's VMs move: restarted on the target (the default), or
// live-migrated (Live) where both hosts allow it, restarted instead where not when Fallback.
type HostDrainOptions struct {
	Live     bool
	Fallback bool
}

func (o HostDrainOptions) body() map[string]any {
	b := map[string]any{"move": true, "mode": "restart"}
	if o.Live {
		b["mode"], b["fallback"] = "live", o.Fallback
	}
	return b
}

// StartMoveDrainHost drains a host and has the apiserver move its VMs to other hosts; it
// returns the plan at once.
func (c *Client) StartMoveDrainHost(ctx context.Context, id string, o HostDrainOptions) (HostDrain, error) {
	return do[HostDrain](ctx, c, request{op: hostOps.drain, args: []string{id}, body: o.body()})
}

// GetHostDrain reads a host's drain.
func (c *Client) GetHostDrain(ctx context.Context, id string) (HostDrain, error) {
	return do[HostDrain](ctx, c, request{op: opHostDrain, args: []string{id}})
}

// MoveDrainHost starts a drain that moves VMs and polls every interval until no move is open,
// calling progress (if not nil) after each look. It returns the last look: VMs that could not
// move are in it with their reasons (they stay on the host).
func (c *Client) MoveDrainHost(ctx context.Context, id string, o HostDrainOptions, interval time.Duration, progress func(HostDrain)) (HostDrain, error) {
	d, err := c.StartMoveDrainHost(ctx, id, o)
	return waitDrain(ctx, interval, d, err, HostDrain.Open, func() (HostDrain, error) { return c.GetHostDrain(ctx, id) }, progress)
}
