package worker

import (
	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/wire"
)

// moduleGlobalManaged serves ModuleGetGlobalManaged: cuModuleGetGlobal, and whether the global is
// a managed variable (a backend that cannot tell has none).
func moduleGlobalManaged(c backend.Context, m *wire.ModuleGetGlobalManaged) wire.Message {
	p, n, err := c.ModuleGetGlobal(backend.Handle(m.Module), m.Name)
	managed := false
	if mg, ok := c.(backend.ManagedGlobals); ok && err == nil {
		managed, err = mg.IsManaged(p)
	}
	r := &wire.ModuleGlobalReply{Result: int32(backend.ResultOf(err))}
	if err == nil {
		r.Ptr, r.Bytes = p, n
		if managed {
			r.Managed = 1
		}
	}
	return r
}
