package sim

import (
	"fmt"

	"gpucloud/gpuserverd/backend"
)

// APICall answers the generically remoted driver functions the simulator models (peer queries,
// stream and function properties, occupancy); any other is CUDA_ERROR_NOT_SUPPORTED, as a real
// driver without the function would answer.
func (c *Context) APICall(f backend.APIFunc, a []uint64) ([]uint64, error) {
	out := make([]uint64, len(f.Args))
	k := len(f.Args) // an output the simulator does not write keeps the caller's value, as with a driver
	for i, kind := range f.Args {
		if kind == backend.ArgOut && k < len(a) {
			out[i] = a[k]
			k++
		}
	}
	switch f.ID {
	case backend.APIDeviceCanAccessPeer: // (int *can, CUdevice dev, CUdevice peer)
		if err := c.b.twoDevices(a[1], a[2]); err != nil {
			return nil, err
		}
		out[0] = b2u(a[1] != a[2]) // every simulated GPU reaches every other; none "peers" itself
	case backend.APIDeviceGetP2PAttribute: // (int *value, CUdevice_P2PAttribute, CUdevice src, CUdevice dst)
		if err := c.b.twoDevices(a[2], a[3]); err != nil {
			return nil, err
		}
		if a[2] == a[3] {
			return nil, fmt.Errorf("P2P attribute of device %d with itself: %w", a[2], backend.ErrInvalidDevice)
		}
		switch a[1] {
		case 1: // CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK
			out[0] = 0
		case 2, 3, 4: // ACCESS_SUPPORTED, NATIVE_ATOMIC_SUPPORTED, CUDA_ARRAY_ACCESS_SUPPORTED
			out[0] = 1
		default:
			return nil, fmt.Errorf("P2P attribute %d: %w", a[1], backend.ErrInvalidValue)
		}
	case backend.APICtxGetStreamPriorityRange: // (int *least, int *greatest): an H100's
		greatest := int64(-5)
		out[0], out[1] = 0, uint64(greatest)
	case backend.APIStreamGetFlags, backend.APIStreamGetFlags_ptsz: // (CUstream, unsigned *flags)
		s, err := c.stream(backend.Handle(a[0]))
		if err != nil {
			return nil, err
		}
		out[1] = b2u(a[0] != 0 && !s.blocking) // CU_STREAM_NON_BLOCKING; the default stream is 0
	case backend.APIStreamGetPriority, backend.APIStreamGetPriority_ptsz: // (CUstream, int *priority)
		if _, err := c.stream(backend.Handle(a[0])); err != nil {
			return nil, err
		}
		out[1] = 0 // every simulated stream has the default priority
	case backend.APIFuncGetParamInfo: // (CUfunction, size_t index, size_t *offset, size_t *size)
		params, err := c.ParamLayout(backend.Handle(a[0]))
		if err != nil {
			return nil, err
		}
		if a[1] >= uint64(len(params)) {
			return nil, fmt.Errorf("parameter %d of %d: %w", a[1], len(params), backend.ErrInvalidValue)
		}
		out[2], out[3] = uint64(params[a[1]].Offset), uint64(params[a[1]].Size)
	case backend.APIOccupancyAvailableDynamicSMemPerBlock: // (size_t *, CUfunction, int numBlocks, int blockSize)
		if _, err := c.function(backend.Handle(a[1])); err != nil {
			return nil, err
		}
		blocks, size := int32(a[2]), int32(a[3])
		if blocks <= 0 || size <= 0 || size > 1024 {
			return nil, fmt.Errorf("%d blocks of %d threads: %w", blocks, size, backend.ErrInvalidValue)
		}
		perSM := uint64(228 << 10) // an H100's shared memory per SM, 1 KiB of it reserved per block
		share := perSM/uint64(blocks) - 1<<10
		out[0] = min(share, 227<<10)
	case backend.APICtxResetPersistingL2Cache: // nothing persists in a simulated L2
	case backend.APIFuncSetCacheConfig: // (CUfunction, CUfunc_cache): a preference, kept nowhere
		if _, err := c.function(backend.Handle(a[0])); err != nil {
			return nil, err
		}
		if a[1] > 3 {
			return nil, fmt.Errorf("cache config %d: %w", a[1], backend.ErrInvalidValue)
		}
	default:
		return nil, fmt.Errorf("%s on the simulated backend: %w", f.Name, backend.ErrNotSupported)
	}
	return out, nil
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// twoDevices checks both ordinals name simulated devices.
func (b *Backend) twoDevices(x, y uint64) error {
	for _, d := range []uint64{x, y} {
		if d >= uint64(len(b.devices)) {
			return fmt.Errorf("device %d of %d: %w", d, len(b.devices), backend.ErrInvalidDevice)
		}
	}
	return nil
}
