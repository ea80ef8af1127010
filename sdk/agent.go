package sdk

import (
	"context"
	"net/url"
	"time"

	"gpucloud/api"
)

// The agent API, for daemons (hostd, gpuserverd) and tools that play one; the Client's key is
// the daemon's credential. The types are the shared contract in package api.

// HostHeartbeat registers or refreshes a host.
func (c *Client) HostHeartbeat(ctx context.Context, r api.HostReport) (api.HostAck, error) {
	return do[api.HostAck](ctx, c, request{op: opHostHeartbeat, body: r})
}

// HostInstances lists the instances wanted on the calling host.
func (c *Client) HostInstances(ctx context.Context) (api.DesiredInstances, error) {
	return do[api.DesiredInstances](ctx, c, request{op: opHostInstances})
}

// ReportInstance tells the apiserver what the host observes of one instance.
func (c *Client) ReportInstance(ctx context.Context, id string, obs api.InstanceObserved) error {
	return c.call(ctx, request{op: opHostReport, args: []string{id}, body: obs})
}

// ReportHostMove is a host's word on a drain's move it is the source or target of.
func (c *Client) ReportHostMove(ctx context.Context, id string, r api.HostMoveReport) error {
	return c.call(ctx, request{op: opHostReportMove, args: []string{id}, body: r})
}

// RenewSessionToken gets a fresh session token for an instance with a GPU.
func (c *Client) RenewSessionToken(ctx context.Context, id string) (api.SessionToken, error) {
	return do[api.SessionToken](ctx, c, request{op: opRenewToken, args: []string{id}})
}

// GPUServerHeartbeat registers or refreshes a GPU server and its GPUs.
func (c *Client) GPUServerHeartbeat(ctx context.Context, r api.GPUServerReport) (api.GPUServerAck, error) {
	return do[api.GPUServerAck](ctx, c, request{op: opGPUServerHeartbeat, body: r})
}

// Revocations returns the calling GPU server's revoked instances; when known is the version it
// has, the answer waits up to wait (at most api.MaxRevocationWait) for a change.
func (c *Client) Revocations(ctx context.Context, known string, wait time.Duration) (api.Revocations, error) {
	q := url.Values{"known": {known}, "wait": {wait.String()}}
	return do[api.Revocations](ctx, c, request{op: opRevocations, query: q})
}

// PostUsage sends a batch of usage records (a daemon's credential; each record's source must be
// the daemon's own id). Records are counted once by id, so a retried batch is safe.
func (c *Client) PostUsage(ctx context.Context, b api.UsageBatch) (api.UsageBatchResult, error) {
	return do[api.UsageBatchResult](ctx, c, request{op: opPostUsage, body: b})
}
