package sdk

import (
	"context"
	"time"
)

// Image is a bootable image instances name; Source is shown to operators only.
type Image struct {
	ID             string    `json:"id"`
	Name           string    `json:"name"`
	Source         string    `json:"source,omitempty"`
	SHA256         string    `json:"sha256"`
	MinDiskGiB     int       `json:"min_disk_gib"`
	GuestLibraries bool      `json:"guest_libraries"`
	Description    string    `json:"description,omitempty"`
	CreatedAt      time.Time `json:"created_at"`
}

// CreateImageRequest registers an image (operator): Source is file:///path on the hosts or an
// http(s):// URL, SHA256 the checksum hostd verifies, MinDiskGiB the smallest disk it needs.
type CreateImageRequest struct {
	Name           string `json:"name"`
	Source         string `json:"source"`
	SHA256         string `json:"sha256"`
	MinDiskGiB     int    `json:"min_disk_gib"`
	GuestLibraries bool   `json:"guest_libraries"`
	Description    string `json:"description,omitempty"`
}

// ListImages returns every image instances can boot (one page).
func (c *Client) ListImages(ctx context.Context) ([]Image, error) {
	p, err := listPage[Image](ctx, c, opListImages, nil)
	return p.Items, err
}

// GetImage returns an image.
func (c *Client) GetImage(ctx context.Context, id string) (Image, error) {
	return do[Image](ctx, c, request{op: opGetImage, args: []string{id}})
}

// CreateImage registers an image (operator).
func (c *Client) CreateImage(ctx context.Context, r CreateImageRequest) (Image, error) {
	return do[Image](ctx, c, request{op: opCreateImage, body: r})
}

// DeleteImage retires an image (operator); instances made from it keep it.
func (c *Client) DeleteImage(ctx context.Context, id string) error {
	return c.call(ctx, request{op: opDeleteImage, args: []string{id}})
}
