package sim

import (
	"fmt"

	"gpucloud/gpuserverd/backend"
)

// texture is a texture or surface object: what it was created from. The simulator's kernels do
// not sample textures; the object is kept so that its queries answer as the driver's do.
type texture struct {
	res     backend.ResourceDesc
	texDesc []byte
	surface bool
}

// texDescBytes is sizeof(CUDA_TEXTURE_DESC) and viewDescBytes sizeof(CUDA_RESOURCE_VIEW_DESC).
const (
	texDescBytes  = 104
	viewDescBytes = 112
)

// checkResource validates a resource against what the context holds. c.mu held.
func (c *Context) checkResource(r backend.ResourceDesc) error {
	switch r.Type {
	case 0:
		if _, ok := c.fam.arrays[backend.Handle(r.Handle)]; !ok {
			return fmt.Errorf("texture resource: array %d: %w", r.Handle, backend.ErrInvalidHandle)
		}
		return nil
	case 2, 3:
		n := r.SizeBytes
		if r.Type == 3 {
			if r.Pitch < r.Width*backend.ElementBytes(r.Format, r.Channels) || r.Height == 0 {
				return fmt.Errorf("pitched texture resource %dx%d, pitch %d: %w", r.Width, r.Height, r.Pitch, backend.ErrInvalidValue)
			}
			n = r.Pitch * r.Height
		}
		if backend.ElementBytes(r.Format, r.Channels) == 0 || n == 0 {
			return fmt.Errorf("texture resource format %#x, %d channels, %d bytes: %w", r.Format, r.Channels, n, backend.ErrInvalidValue)
		}
		if _, err := c.mem.view(r.Handle, n); err != nil {
			return err
		}
		return nil
	}
	return fmt.Errorf("texture resource type %d: %w", r.Type, backend.ErrInvalidValue)
}

func (c *Context) newObject(t texture) uint64 {
	if c.fam.textures == nil {
		c.fam.textures = map[uint64]texture{}
	}
	c.fam.nextObject++
	h := c.fam.nextObject
	c.fam.textures[h] = t
	return h
}

func (c *Context) TexObjectCreate(r backend.ResourceDesc, texDesc, viewDesc []byte) (uint64, error) {
	if len(texDesc) != texDescBytes || (len(viewDesc) != 0 && len(viewDesc) != viewDescBytes) {
		return 0, fmt.Errorf("texture descriptor of %d bytes, view descriptor of %d: %w", len(texDesc), len(viewDesc), backend.ErrInvalidValue)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.checkResource(r); err != nil {
		return 0, err
	}
	return c.newObject(texture{res: r, texDesc: append([]byte(nil), texDesc...)}), nil
}

func (c *Context) object(h uint64, surface bool) (texture, error) {
	t, ok := c.fam.textures[h]
	if !ok || t.surface != surface {
		return texture{}, fmt.Errorf("texture or surface object %d: %w", h, backend.ErrInvalidHandle)
	}
	return t, nil
}

func (c *Context) TexObjectDestroy(h uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := c.object(h, false); err != nil {
		return err
	}
	delete(c.fam.textures, h)
	return nil
}

func (c *Context) TexObjectResourceDesc(h uint64) (backend.ResourceDesc, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, err := c.object(h, false)
	return t.res, err
}

func (c *Context) SurfObjectCreate(r backend.ResourceDesc) (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.Type != 0 {
		return 0, fmt.Errorf("surface resource type %d: surfaces are made of arrays: %w", r.Type, backend.ErrInvalidValue)
	}
	if err := c.checkResource(r); err != nil {
		return 0, err
	}
	if c.fam.arrays[backend.Handle(r.Handle)].desc.Flags&0x02 == 0 { // CUDA_ARRAY3D_SURFACE_LDST
		return 0, fmt.Errorf("surface of array %d created without CUDA_ARRAY3D_SURFACE_LDST: %w", r.Handle, backend.ErrInvalidValue)
	}
	return c.newObject(texture{res: r, surface: true}), nil
}

func (c *Context) SurfObjectDestroy(h uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := c.object(h, true); err != nil {
		return err
	}
	delete(c.fam.textures, h)
	return nil
}
