package sdk

import (
	"context"
	"fmt"
	"time"
)

// GPUServerMove is one instance a GPU server's drain moves (or could not move: state unplaced,
// with the reason).
type GPUServerMove struct {
	ID            string     `json:"id"`
	InstanceID    string     `json:"instance_id"`
	TenantID      string     `json:"tenant_id"`
	SourceID      string     `json:"source_id"`
	TargetID      string     `json:"target_id,omitempty"`
	State         string     `json:"state"` // unplaced, pending, moving, done or failed
	Reason        string     `json:"reason,omitempty"`
	SessionsMoved int        `json:"sessions_moved"`
	BytesCopied   int64      `json:"bytes_copied"`
	BytesTotal    int64      `json:"bytes_total"`
	PauseMs       float64    `json:"pause_ms"`
	CreatedAt     time.Time  `json:"created_at"`
	UpdatedAt     time.Time  `json:"updated_at"`
	FinishedAt    *time.Time `json:"finished_at,omitempty"`
}

// GPUServerDrain is a GPU server's drain: each instance's newest move, and the GPU instances
// still placed on it.
type GPUServerDrain struct {
	GPUServerID string          `json:"gpu_server_id"`
	Draining    bool            `json:"draining"`
	Remaining   int             `json:"remaining"`
	Counts      map[string]int  `json:"counts"`
	Moves       []GPUServerMove `json:"moves"`
}

// Open counts the moves not finished yet (pending or moving).
func (d GPUServerDrain) Open() int { return d.Counts["pending"] + d.Counts["moving"] }

// StartMoveDrainGPUServer drains a GPU server and has the apiserver move its instances' sessions
// to other GPU servers (a drain that moves work); it returns the plan at once.
func (c *Client) StartMoveDrainGPUServer(ctx context.Context, id string) (GPUServerDrain, error) {
	return do[GPUServerDrain](ctx, c, request{op: gpuServerOps.drain, args: []string{id}, body: map[string]bool{"move": true}})
}

// GetGPUServerDrain reads a GPU server's drain.
func (c *Client) GetGPUServerDrain(ctx context.Context, id string) (GPUServerDrain, error) {
	return do[GPUServerDrain](ctx, c, request{op: opGPUServerDrain, args: []string{id}})
}

// MoveDrainGPUServer starts a drain that moves work and polls every interval until no move is
// open, calling progress (if not nil) after each look. It returns the last look: moves that
// failed or found no room are in it with their reasons (the instances stay on the server).
func (c *Client) MoveDrainGPUServer(ctx context.Context, id string, interval time.Duration, progress func(GPUServerDrain)) (GPUServerDrain, error) {
	d, err := c.StartMoveDrainGPUServer(ctx, id)
	return waitDrain(ctx, interval, d, err, GPUServerDrain.Open, func() (GPUServerDrain, error) { return c.GetGPUServerDrain(ctx, id) }, progress)
}

// waitDrain polls a drain (first look d, err) every interval until open says no move is open.
func waitDrain[D any](ctx context.Context, interval time.Duration, d D, err error, open func(D) int, look func() (D, error),
	progress func(D)) (D, error) {
	for err == nil {
		if progress != nil {
			progress(d)
		}
		if open(d) == 0 {
			return d, nil
		}
		if err = sleep(ctx, interval); err != nil {
			return d, fmt.Errorf("drain: %d moves open: %w", open(d), err)
		}
		d, err = look()
	}
	return d, err
}
