package sdk

import (
	"context"
	"fmt"
	"iter"
	"time"
)

// CreateHost registers a host (operator); the credential is in the answer only.
func (c *Client) CreateHost(ctx context.Context, name string) (NewDaemon, error) {
	return c.createDaemon(ctx, hostOps, name)
}

// CreateGPUServer registers a GPU server (operator); the credential is in the answer only.
func (c *Client) CreateGPUServer(ctx context.Context, name string) (NewDaemon, error) {
	return c.createDaemon(ctx, gpuServerOps, name)
}

func (c *Client) createDaemon(ctx context.Context, f fleet, name string) (NewDaemon, error) {
	return do[NewDaemon](ctx, c, request{op: f.create, body: map[string]string{"name": name}})
}

// ListHosts returns a page of hosts (operator).
func (c *Client) ListHosts(ctx context.Context, o ListOptions) (Page[Host], error) {
	return listPage[Host](ctx, c, hostOps.list, o.values())
}

// Hosts iterates every host.
func (c *Client) Hosts(ctx context.Context) iter.Seq2[Host, error] {
	return all(ctx, func(ctx context.Context, cur string) (Page[Host], error) {
		return c.ListHosts(ctx, ListOptions{Limit: 200, Cursor: cur})
	})
}

// GetHost returns a host.
func (c *Client) GetHost(ctx context.Context, id string) (Host, error) {
	return do[Host](ctx, c, request{op: hostOps.get, args: []string{id}})
}

// CordonHost stops placement on a host.
func (c *Client) CordonHost(ctx context.Context, id string) (Host, error) {
	return c.hostAction(ctx, hostOps.cordon, id)
}

// UncordonHost allows placement on a host again (and ends a drain).
func (c *Client) UncordonHost(ctx context.Context, id string) (Host, error) {
	return c.hostAction(ctx, hostOps.uncordon, id)
}

// StartDrainHost cordons a host and marks it draining; it returns at once (see DrainHost).
func (c *Client) StartDrainHost(ctx context.Context, id string) (Host, error) {
	return c.hostAction(ctx, hostOps.drain, id)
}

// DeleteHost removes a host without instances.
func (c *Client) DeleteHost(ctx context.Context, id string) error {
	return c.call(ctx, request{op: hostOps.del, args: []string{id}})
}

func (c *Client) hostAction(ctx context.Context, o Op, id string) (Host, error) {
	return do[Host](ctx, c, request{op: o, args: []string{id}})
}

// ListGPUServers returns a page of GPU servers with their GPUs (operator).
func (c *Client) ListGPUServers(ctx context.Context, o ListOptions) (Page[GPUServer], error) {
	return listPage[GPUServer](ctx, c, gpuServerOps.list, o.values())
}

// GPUServers iterates every GPU server.
func (c *Client) GPUServers(ctx context.Context) iter.Seq2[GPUServer, error] {
	return all(ctx, func(ctx context.Context, cur string) (Page[GPUServer], error) {
		return c.ListGPUServers(ctx, ListOptions{Limit: 200, Cursor: cur})
	})
}

// GetGPUServer returns a GPU server with its GPUs.
func (c *Client) GetGPUServer(ctx context.Context, id string) (GPUServer, error) {
	return do[GPUServer](ctx, c, request{op: gpuServerOps.get, args: []string{id}})
}

// CordonGPUServer stops placement on a GPU server.
func (c *Client) CordonGPUServer(ctx context.Context, id string) (GPUServer, error) {
	return c.gpuServerAction(ctx, gpuServerOps.cordon, id)
}

// UncordonGPUServer allows placement on a GPU server again.
func (c *Client) UncordonGPUServer(ctx context.Context, id string) (GPUServer, error) {
	return c.gpuServerAction(ctx, gpuServerOps.uncordon, id)
}

// StartDrainGPUServer cordons a GPU server and marks it draining.
func (c *Client) StartDrainGPUServer(ctx context.Context, id string) (GPUServer, error) {
	return c.gpuServerAction(ctx, gpuServerOps.drain, id)
}

// DeleteGPUServer removes a GPU server without instances.
func (c *Client) DeleteGPUServer(ctx context.Context, id string) error {
	return c.call(ctx, request{op: gpuServerOps.del, args: []string{id}})
}

func (c *Client) gpuServerAction(ctx context.Context, o Op, id string) (GPUServer, error) {
	return do[GPUServer](ctx, c, request{op: o, args: []string{id}})
}

// DrainProgress is one look at a draining machine.
type DrainProgress struct {
	// Remaining are the instances still placed there (not deleted).
	Remaining []Instance
	Elapsed   time.Duration
}

// DrainHost cordons and drains a host, then polls every interval until no instance remains on
// it, calling progress (if not nil) after each poll. It returns when the host is empty or ctx
// ends. Instances leave when their owners (or operators) delete them and the host reports them
// deleted; the apiserver does not move them.
func (c *Client) DrainHost(ctx context.Context, id string, interval time.Duration, progress func(DrainProgress)) error {
	if _, err := c.StartDrainHost(ctx, id); err != nil {
		return err
	}
	return c.waitEmpty(ctx, interval, progress, InstanceFilter{HostID: id})
}

// DrainGPUServer is DrainHost for a GPU server: it waits until no instance uses its GPUs.
func (c *Client) DrainGPUServer(ctx context.Context, id string, interval time.Duration, progress func(DrainProgress)) error {
	if _, err := c.StartDrainGPUServer(ctx, id); err != nil {
		return err
	}
	return c.waitEmpty(ctx, interval, progress, InstanceFilter{GPUServerID: id})
}

// waitEmpty polls the list of live instances that pass on until it is empty.
func (c *Client) waitEmpty(ctx context.Context, interval time.Duration, progress func(DrainProgress), on InstanceFilter) error {
	start := time.Now()
	for {
		left, err := Collect(c.Instances(ctx, on))
		if err != nil {
			return err
		}
		if progress != nil {
			progress(DrainProgress{Remaining: left, Elapsed: time.Since(start)})
		}
		if len(left) == 0 {
			return nil
		}
		if err := sleep(ctx, interval); err != nil {
			return fmt.Errorf("drain: %d instances remain: %w", len(left), err)
		}
	}
}
