package worker

import (
	"encoding/binary"
	"fmt"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/wire"
)

// apiCall runs one generically remoted driver function (gpuserverd/apigen): its id must be one this
// server knows (a newer guest's is CUDA_ERROR_NOT_SUPPORTED), its arguments one u64 per parameter
// then each output's value before the call,
// and its devices the session's own, mapped to the backend's ordinals here, so a guest never
// names a GPU it was not granted. Handles are looked up by the backend in this session's context.
func (s *Session) apiCall(c backend.Context, m *wire.ApiCall) *wire.ApiCallReply {
	f, ok := apiCalls[m.Fn]
	if !ok {
		return apiReply(nil, 0, fmt.Errorf("driver function %d: %w", m.Fn, backend.ErrNotSupported))
	}
	words := len(f.Args) + f.Outputs()
	if len(m.Args) != 8*words {
		return apiReply(nil, 0, fmt.Errorf("%s: %d argument bytes, want %d: %w", f.Name, len(m.Args), 8*words, backend.ErrInvalidValue))
	}
	args := make([]uint64, words)
	for i := range args {
		args[i] = binary.LittleEndian.Uint64(m.Args[8*i:])
		if i < len(f.Args) && f.Args[i] == backend.ArgDevice {
			if args[i] >= uint64(len(s.cfg.Devices)) {
				return apiReply(nil, 0, fmt.Errorf("%s: device %d of %d granted: %w", f.Name, int64(args[i]), len(s.cfg.Devices), backend.ErrInvalidDevice))
			}
			args[i] = uint64(s.cfg.Devices[args[i]])
		}
		if i < len(f.Args) && f.Args[i] == backend.ArgStream && args[i]&wire.PerThreadStream != 0 {
			if h, ok := s.perThreadStream(args[i]); ok {
				args[i] = uint64(h)
			}
		}
	}
	caller, ok := c.(backend.APICaller)
	if !ok {
		return apiReply(nil, 0, fmt.Errorf("%s: %w", f.Name, backend.ErrNotSupported))
	}
	out, err := caller.APICall(f, args)
	if err == nil && len(out) != len(f.Args) {
		err = fmt.Errorf("%s: backend gave %d outputs for %d parameters: %w", f.Name, len(out), len(f.Args), backend.ErrUnknown)
	}
	return apiReply(out, len(f.Args), err)
}

// apiReply answers with err's result and, on success, the n outputs.
func apiReply(out []uint64, n int, err error) *wire.ApiCallReply {
	r := &wire.ApiCallReply{Result: int32(backend.ResultOf(err))}
	if err == nil {
		r.Out = make([]byte, 8*n)
		for i, v := range out {
			binary.LittleEndian.PutUint64(r.Out[8*i:], v)
		}
	}
	return r
}
