package cuda

import (
	"fmt"

	"gpucloud/gpuserverd/backend"
)

// handles maps the opaque ids a session sees to driver objects. A session never hands the driver
// a raw pointer it made up: an unknown or stale id is CUDA_ERROR_INVALID_HANDLE, not a crash.
type handles[T any] struct {
	kind string
	next *backend.Handle // shared by every table of one context, so ids never repeat across kinds
	m    map[backend.Handle]T
}

func newHandles[T any](kind string, next *backend.Handle) handles[T] {
	return handles[T]{kind: kind, next: next, m: map[backend.Handle]T{}}
}

func (h *handles[T]) add(v T) backend.Handle {
	*h.next++
	h.m[*h.next] = v
	return *h.next
}

func (h *handles[T]) get(id backend.Handle) (T, error) {
	v, ok := h.m[id]
	if !ok {
		return v, fmt.Errorf("cuda: no %s with handle %d: %w", h.kind, id, backend.ErrInvalidHandle)
	}
	return v, nil
}

func (h *handles[T]) remove(id backend.Handle) { delete(h.m, id) }

// put sets id to v (a restore, which gives objects back their old ids); the caller sets next
// past every id afterwards.
func (h *handles[T]) put(id backend.Handle, v T) { h.m[id] = v }
