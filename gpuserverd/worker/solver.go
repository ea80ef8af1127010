package worker

import (
	"encoding/binary"
	"fmt"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/wire"
)

// A session's cuSOLVER objects are bounded: NVIDIA's cusolverDnCreate takes device memory of its
// own (its cuBLAS handle, internal buffers) that no quota sees, so a hostile guest must not make
// handles without end; params and infos are small host objects.
const (
	solverMaxHandles = 64
	solverMaxObjects = 4096
)

// solverState is a device's cuSOLVER objects (handles, params, syevj and gesvdj infos): the ids
// this session made, by kind. An id is looked up here before the backend sees it, so another
// session's (or a made-up) id is refused, never translated.
type solverState struct {
	objs map[backend.Handle]uint8 // id -> backend.SolverObj*
}

func solverReply(out []uint64, err error) *wire.SolverReply {
	r := &wire.SolverReply{Result: int32(backend.ResultOf(err)), Status: int32(backend.SolverStatusOf(err))}
	if err != nil {
		r.Message = truncate(err.Error(), 1024)
		return r
	}
	words := []*uint64{&r.O0, &r.O1, &r.O2, &r.O3, &r.O4, &r.O5, &r.O6, &r.O7, &r.O8, &r.O9, &r.O10,
		&r.O11, &r.O12, &r.O13, &r.O14, &r.O15}
	for i, v := range out {
		*words[i] = v
	}
	return r
}

func solverBad(op string, st backend.SolverStatus, f string, a ...any) error {
	return &backend.SolverError{Op: op, Status: st, Detail: fmt.Sprintf(f, a...)}
}

// solver serves one cuSOLVER call on the current device.
func (s *Session) solver(d *device, m *wire.SolverCall) *wire.SolverReply {
	c, ok := d.ctx.(backend.SolverContext)
	if !ok {
		return solverReply(nil, solverBad("cusolver", backend.SolverNotSupported, "this backend has no cuSOLVER"))
	}
	if d.solver.objs == nil {
		d.solver.objs = map[backend.Handle]uint8{}
	}
	f, args, err := d.solver.decode(m)
	if err != nil {
		return solverReply(nil, err)
	}
	out, err := c.SolverCall(f, args)
	if f.Destroy {
		delete(d.solver.objs, backend.Handle(args[0]))
	}
	if err == nil && len(out) != f.OutWords(args) {
		err = solverBad(f.Name, backend.SolverInternalError, "backend gave %d output words, want %d", len(out), f.OutWords(args))
	}
	if err != nil {
		return solverReply(nil, err)
	}
	for _, o := range f.Outputs(args) {
		if a := f.Args[o.Param]; a.Kind == backend.SolverNew {
			d.solver.objs[backend.Handle(out[o.First])] = a.Obj
		}
	}
	return solverReply(out, nil)
}

// decode checks a call's shape: a remoted function, one word per parameter, every object one of
// the session's of the right kind, output arrays and host scratch within the reply and the bound.
func (st *solverState) decode(m *wire.SolverCall) (backend.SolverFunc, []uint64, error) {
	f, ok := backend.SolverFuncs[m.Fn]
	if !ok {
		return f, nil, solverBad("cusolver call", backend.SolverNotSupported, "function %d is not remoted by this server", m.Fn)
	}
	if len(m.Args) != 8*len(f.Args) {
		return f, nil, solverBad(f.Name, backend.SolverInvalidValue, "args: %d bytes for %d parameters", len(m.Args), len(f.Args))
	}
	args := make([]uint64, len(f.Args))
	for i := range args {
		args[i] = binary.LittleEndian.Uint64(m.Args[8*i:])
	}
	for i, a := range f.Args {
		switch a.Kind {
		case backend.SolverObject:
			if args[i] == 0 && a.Nullable {
				continue // NULL params: NVIDIA's default algorithms
			}
			if kind, ok := st.objs[backend.Handle(args[i])]; !ok || kind != a.Obj {
				status := backend.SolverInvalidValue
				if i == 0 {
					status = backend.SolverNotInitialized
				}
				return f, nil, solverBad(f.Name, status, "parameter %d: no cuSOLVER object %d of kind %d in this session", i, args[i], a.Obj)
			}
		case backend.SolverOutArray:
			if args[i] != 0 && args[a.Ref] > backend.SolverMaxOut {
				return f, nil, solverBad(f.Name, backend.SolverInvalidValue, "parameter %d: a host array of %d elements (at most %d)", i, int64(args[a.Ref]), backend.SolverMaxOut)
			}
		case backend.SolverHostWork:
			if args[i] != 0 && args[a.Ref] > backend.SolverMaxHostWork {
				return f, nil, solverBad(f.Name, backend.SolverInvalidValue, "parameter %d: %d bytes of host scratch (at most %d)", i, args[a.Ref], backend.SolverMaxHostWork)
			}
		}
	}
	for i, a := range f.Args {
		if a.Kind == backend.SolverNew && args[i] != 0 {
			if err := st.room(f.Name, a.Obj); err != nil {
				return f, nil, err
			}
		}
	}
	if n := f.OutWords(args); n > backend.SolverMaxOut {
		return f, nil, solverBad(f.Name, backend.SolverInvalidValue, "%d output words (at most %d)", n, backend.SolverMaxOut)
	}
	return f, args, nil
}

// room refuses a new object of kind obj past the session's bound.
func (st *solverState) room(op string, obj uint8) error {
	n, total := 0, len(st.objs)
	for _, k := range st.objs {
		if k == obj {
			n++
		}
	}
	if obj == backend.SolverObjHandle && n >= solverMaxHandles || total >= solverMaxObjects {
		return solverBad(op, backend.SolverAllocFailed, "%d cuSOLVER handles, %d objects in this session: at most %d handles, %d objects",
			n, total, solverMaxHandles, solverMaxObjects)
	}
	return nil
}
