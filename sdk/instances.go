package sdk

import (
	"context"
	"fmt"
	"iter"
	"net/url"
	"strings"
	"time"
)

// CreateInstance places and reserves a VM (tenant roles).
func (c *Client) CreateInstance(ctx context.Context, r CreateInstanceRequest) (Instance, error) {
	return do[Instance](ctx, c, request{op: opCreateInstance, body: r})
}

// InstanceFilter narrows instance lists. The zero value lists live instances: deleted ones
// come only with IncludeDeleted, or when States names StateDeleted.
type InstanceFilter struct {
	States         []string // any of these states; empty: any
	HostID         string   // only instances on this host
	GPUServerID    string   // only instances with GPUs on this GPU server
	IncludeDeleted bool
	// Conditions: only live instances with all of these, each "TYPE=STATUS", e.g.
	// ConditionHostReachable+"="+ConditionFalse.
	Conditions []string
}

// InstanceListOptions page through a filtered instance list.
type InstanceListOptions struct {
	ListOptions
	InstanceFilter
}

func (o InstanceListOptions) values() url.Values {
	v := o.ListOptions.values()
	if len(o.States) > 0 {
		v.Set("state", strings.Join(o.States, ","))
	}
	if o.HostID != "" {
		v.Set("host_id", o.HostID)
	}
	if o.GPUServerID != "" {
		v.Set("gpu_server_id", o.GPUServerID)
	}
	if o.IncludeDeleted {
		v.Set("include_deleted", "true")
	}
	for _, c := range o.Conditions {
		v.Add("condition", c)
	}
	return v
}

// ListInstances returns a page of instances (a tenant's own; every tenant's for platform roles)
// that pass o's filter.
func (c *Client) ListInstances(ctx context.Context, o InstanceListOptions) (Page[Instance], error) {
	return listPage[Instance](ctx, c, opListInstances, o.values())
}

// Instances iterates every visible instance that passes f (InstanceFilter{}: every live one).
func (c *Client) Instances(ctx context.Context, f InstanceFilter) iter.Seq2[Instance, error] {
	return all(ctx, func(ctx context.Context, cur string) (Page[Instance], error) {
		return c.ListInstances(ctx, InstanceListOptions{ListOptions{Limit: 200, Cursor: cur}, f})
	})
}

// GetInstance returns an instance.
func (c *Client) GetInstance(ctx context.Context, id string) (Instance, error) {
	return do[Instance](ctx, c, request{op: opGetInstance, args: []string{id}})
}

// InstanceEvents returns an instance's state transitions, oldest first.
func (c *Client) InstanceEvents(ctx context.Context, id string) ([]Event, error) {
	p, err := listPage[Event](ctx, c, opInstanceEvents, nil, id)
	return p.Items, err
}

// StartInstance starts a stopped instance.
func (c *Client) StartInstance(ctx context.Context, id string) (Instance, error) {
	return c.act(ctx, opStartInstance, id)
}

// StopInstance stops an instance.
func (c *Client) StopInstance(ctx context.Context, id string) (Instance, error) {
	return c.act(ctx, opStopInstance, id)
}

// RebootInstance reboots a running instance.
func (c *Client) RebootInstance(ctx context.Context, id string) (Instance, error) {
	return c.act(ctx, opRebootInstance, id)
}

// DeleteInstance asks for an instance to be deleted; it goes through "deleting".
func (c *Client) DeleteInstance(ctx context.Context, id string) (Instance, error) {
	return c.act(ctx, opDeleteInstance, id)
}

// firstPoll is WaitInstance's first pause.
const firstPoll = 100 * time.Millisecond

func (c *Client) act(ctx context.Context, o Op, id string) (Instance, error) {
	return do[Instance](ctx, c, request{op: o, args: []string{id}})
}

// WaitInstance polls an instance until it is in one of states, fails (a failed instance is an
// error unless "failed" is wanted), or ctx ends. Polls start fast (every 100 ms) and back off,
// doubling, to every interval: most transitions end within a second or two, and a long wait
// should not hammer the API. onPoll, if not nil, sees every poll's answer (progress displays).
func (c *Client) WaitInstance(ctx context.Context, id string, interval time.Duration, onPoll func(Instance), states ...string) (Instance, error) {
	want := map[string]bool{}
	for _, s := range states {
		want[s] = true
	}
	wait := min(firstPoll, interval)
	for {
		inst, err := c.GetInstance(ctx, id)
		if err != nil {
			// A deleted instance may vanish from the API: that is the deleted state.
			if IsNotFound(err) && want[StateDeleted] {
				inst.ID, inst.State = id, StateDeleted
				return inst, nil
			}
			return inst, err
		}
		if onPoll != nil {
			onPoll(inst)
		}
		if want[inst.State] {
			return inst, nil
		}
		if inst.State == StateFailed {
			return inst, fmt.Errorf("instance %s failed: %s", id, inst.FailureReason)
		}
		if err := sleep(ctx, wait); err != nil {
			return inst, fmt.Errorf("waiting for instance %s to be %v (now %s): %w", id, states, inst.State, err)
		}
		wait = min(2*wait, interval)
	}
}

// InstanceConsole returns the tail of an instance's serial console (each read is audited).
func (c *Client) InstanceConsole(ctx context.Context, id string) (ConsoleLog, error) {
	return do[ConsoleLog](ctx, c, request{op: opGetConsole, args: []string{id}})
}
