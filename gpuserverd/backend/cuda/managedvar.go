package cuda

/*
#include "driver.h"
*/
import "C"

// IsManaged is cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_IS_MANAGED) of ptr in this context.
func (c *Context) IsManaged(ptr uint64) (bool, error) {
	if err := c.live(); err != nil {
		return false, err
	}
	var v C.uint
	if err := check("cuPointerGetAttribute(IS_MANAGED)", C.gc_pointer_is_managed(c.ctx, &v, C.CUdeviceptr(ptr))); err != nil {
		return false, err
	}
	return v != 0, nil
}
