package sdk

import (
	"context"
	"iter"
)

// ListGPUModels returns every GPU model (one page).
func (c *Client) ListGPUModels(ctx context.Context) ([]GPUModel, error) {
	p, err := listPage[GPUModel](ctx, c, opListGPUModels, nil)
	return p.Items, err
}

// GetGPUModel returns a GPU model.
func (c *Client) GetGPUModel(ctx context.Context, id string) (GPUModel, error) {
	return do[GPUModel](ctx, c, request{op: opGetGPUModel, args: []string{id}})
}

// CreateGPUModel adds a GPU model (operator).
func (c *Client) CreateGPUModel(ctx context.Context, r CreateGPUModelRequest) (GPUModel, error) {
	return do[GPUModel](ctx, c, request{op: opCreateGPUModel, body: r})
}

// ListTiers returns the tiers.
func (c *Client) ListTiers(ctx context.Context) ([]Tier, error) {
	p, err := listPage[Tier](ctx, c, opListTiers, nil)
	return p.Items, err
}

// SetSharedTier sets the shared tier's GPU memory slice (operator).
func (c *Client) SetSharedTier(ctx context.Context, memorySliceBytes int64) (Tier, error) {
	return do[Tier](ctx, c, request{op: opSetSharedTier, body: map[string]int64{"memory_slice_bytes": memorySliceBytes}})
}

// ListInstanceTypes returns a page of instance types with their prices.
func (c *Client) ListInstanceTypes(ctx context.Context, o ListOptions) (Page[InstanceType], error) {
	return listPage[InstanceType](ctx, c, opListInstanceTypes, o.values())
}

// InstanceTypes iterates every instance type.
func (c *Client) InstanceTypes(ctx context.Context) iter.Seq2[InstanceType, error] {
	return all(ctx, func(ctx context.Context, cur string) (Page[InstanceType], error) {
		return c.ListInstanceTypes(ctx, ListOptions{Limit: 200, Cursor: cur})
	})
}

// GetInstanceType returns an instance type.
func (c *Client) GetInstanceType(ctx context.Context, id string) (InstanceType, error) {
	return do[InstanceType](ctx, c, request{op: opGetInstanceType, args: []string{id}})
}

// CreateInstanceType adds an instance type (operator).
func (c *Client) CreateInstanceType(ctx context.Context, r CreateInstanceTypeRequest) (InstanceType, error) {
	return do[InstanceType](ctx, c, request{op: opCreateInstType, body: r})
}
