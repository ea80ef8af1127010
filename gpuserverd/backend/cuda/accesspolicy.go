package cuda

/*
#include "driver.h"
*/
import "C"

import "gpucloud/gpuserverd/backend"

// StreamSetAccessPolicy is cuStreamSetAttribute(CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW).
func (c *Context) StreamSetAccessPolicy(h backend.Handle, w backend.AccessPolicyWindow) error {
	s, err := c.stream(h)
	if err != nil {
		return err
	}
	return check("cuStreamSetAttribute(ACCESS_POLICY_WINDOW)", C.gc_stream_set_access_policy(c.ctx, s,
		C.uint64_t(w.Base), C.uint64_t(w.Bytes), C.float(w.HitRatio), C.uint(w.HitProp), C.uint(w.MissProp)))
}
