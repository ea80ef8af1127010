package worker

import (
	"fmt"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/wire"
)

// streamAccessPolicy serves StreamSetAccessPolicy: the stream's access-policy window, applied by
// the backend (which checks the window and the stream, as NVIDIA's driver does).
func streamAccessPolicy(c backend.Context, m *wire.StreamSetAccessPolicy) error {
	ap, ok := c.(backend.StreamAccessPolicies)
	if !ok {
		return fmt.Errorf("stream access-policy windows: %w", backend.ErrNotSupported)
	}
	return ap.StreamSetAccessPolicy(backend.Handle(m.Stream), backend.AccessPolicyWindow{Base: m.Base, Bytes: m.Bytes,
		HitRatio: m.HitRatio, HitProp: m.HitProp, MissProp: m.MissProp})
}
