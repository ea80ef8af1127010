package sdk

import (
	"context"
	"time"
)

// Volume is a tenant's disk that outlives instances. State is "available" or "attached"; while
// attached, Device is the guest's disk (vdb..vdi). HostID is set at its first attach: it can
// only be attached to instances on that host afterwards.
type Volume struct {
	ID         string    `json:"id"`
	TenantID   string    `json:"tenant_id"`
	Name       string    `json:"name"`
	SizeGiB    int       `json:"size_gib"`
	State      string    `json:"state"`
	HostID     string    `json:"host_id,omitempty"`
	InstanceID string    `json:"instance_id,omitempty"`
	Device     string    `json:"device,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
	UpdatedAt  time.Time `json:"updated_at"`
}

// CreateVolumeRequest creates a volume of SizeGiB (1-16384).
type CreateVolumeRequest struct {
	Name    string `json:"name"`
	SizeGiB int    `json:"size_gib"`
}

// AttachVolumeRequest names the instance to attach a volume to.
type AttachVolumeRequest struct {
	InstanceID string `json:"instance_id"`
}

// ListVolumes returns the tenant's volumes.
func (c *Client) ListVolumes(ctx context.Context) ([]Volume, error) {
	p, err := listPage[Volume](ctx, c, opListVolumes, nil)
	return p.Items, err
}

// GetVolume returns one of the tenant's volumes.
func (c *Client) GetVolume(ctx context.Context, id string) (Volume, error) {
	return do[Volume](ctx, c, request{op: opGetVolume, args: []string{id}})
}

// CreateVolume creates a volume; beyond the tenant's volumes or volume_gib quota it is refused.
func (c *Client) CreateVolume(ctx context.Context, r CreateVolumeRequest) (Volume, error) {
	return do[Volume](ctx, c, request{op: opCreateVolume, body: r})
}

// AttachVolume attaches a volume to an instance (hotplugged where it runs).
func (c *Client) AttachVolume(ctx context.Context, id, instanceID string) (Volume, error) {
	return do[Volume](ctx, c, request{op: opAttachVolume, args: []string{id}, body: AttachVolumeRequest{InstanceID: instanceID}})
}

// DetachVolume detaches a volume; its data stays.
func (c *Client) DetachVolume(ctx context.Context, id string) (Volume, error) {
	return do[Volume](ctx, c, request{op: opDetachVolume, args: []string{id}})
}

// DeleteVolume deletes a detached volume and its data.
func (c *Client) DeleteVolume(ctx context.Context, id string) error {
	return c.call(ctx, request{op: opDeleteVolume, args: []string{id}})
}
