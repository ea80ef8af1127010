package worker

import (
	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/wire"
)

// randTable serves RandTable: the size of one of cuRAND's host tables (dst and bytes 0), or its
// first bytes copied from the backend's NVIDIA library to the session's device memory at dst,
// whence the guest reads them (guest/curand/tables.c).
func (s *Session) randTable(d *device, m *wire.RandTable) wire.Message {
	f := &backend.LibFunc{Lib: backend.LibRand, Name: "RandTable"}
	size, err := backend.RandTableSize(m.Table)
	switch {
	case err != nil:
		return libReply(backend.LibRand, nil, err)
	case m.Dst == 0 && m.Bytes == 0:
		return libReply(backend.LibRand, []uint64{size}, nil)
	case m.Dst == 0 || m.Bytes == 0 || m.Bytes > size:
		return libReply(backend.LibRand, nil, backend.LibInvalid(f, "table %d: %d bytes to %#x (the table has %d)", m.Table, m.Bytes, m.Dst, size))
	}
	rt, ok := d.ctx.(backend.RandTables)
	if !ok {
		return libReply(backend.LibRand, nil, backend.LibNotSupported(f, "this backend has no cuRAND tables"))
	}
	b, err := rt.RandTable(m.Table)
	if err == nil {
		err = d.ctx.MemcpyHtoD(m.Dst, b[:m.Bytes], 0, false)
	}
	return libReply(backend.LibRand, []uint64{size}, err)
}
