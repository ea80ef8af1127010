package worker

import (
	"encoding/binary"
	"fmt"
	"strings"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/wire"
)

// libState is a device's math-library objects (cuSPARSE handles and descriptors, cuFFT plans,
// cuRAND generators, cuSOLVER handles, params and infos) by kind: the ids this session made. An id
// is looked up here before the backend sees it, so another session's (or a made-up) id is refused,
// never translated. Objects are keyed by library and kind ("cuSOLVER handle").
type libState struct {
	objs map[string]map[uint64]bool
	fft  map[uint64]*fftArea // cuFFT plans' work areas (fftarea.go)
	// vars are the values the annotations name (v>name, r>name) and staged arrays' counts read
	// ($name), by library and name; scratch is the largest host workspace a library reported (R).
	vars    map[string]int64
	scratch uint64
}

func (st *libState) has(kind string, id uint64) bool { return st.objs[kind][id] }

// live says whether any object is held (a checkpoint cannot rebuild them).
func (st *libState) live() bool {
	for _, ids := range st.objs {
		if len(ids) > 0 {
			return true
		}
	}
	return false
}

func (st *libState) add(kind string, id uint64) {
	if st.objs == nil {
		st.objs = map[string]map[uint64]bool{}
	}
	if st.objs[kind] == nil {
		st.objs[kind] = map[uint64]bool{}
	}
	st.objs[kind][id] = true
}

// A session's library objects are bounded: a library's handle (cusolverDnCreate, cusparseCreate)
// takes device memory of its own that no quota sees, so a hostile guest must not make them
// without end; descriptors, plans and infos are bounded all together.
const (
	libMaxHandles = 64
	libMaxObjects = 4096
)

// room refuses a new object of kind past the session's bound.
func (st *libState) room(f *backend.LibFunc, kind string) error {
	total := 0
	for _, m := range st.objs {
		total += len(m)
	}
	n := len(st.objs[kind])
	if strings.HasSuffix(kind, " handle") && n >= libMaxHandles || total >= libMaxObjects {
		return &backend.LibError{Lib: f.Lib, Op: f.Name, Status: backend.LibStatusOf(f.Lib, backend.ErrOutOfMemory),
			Detail: fmt.Sprintf("%d %ss, %d library objects in this session: at most %d handles of a library, %d objects",
				n, kind, total, libMaxHandles, libMaxObjects)}
	}
	return nil
}

// objKind is the key of a parameter's object kind in libState: its library's name and the kind
// ("cuSOLVER handle"); a kind lib.kind is another library's ("cusparse.matdescr": cuSPARSE's).
func objKind(f *backend.LibFunc, p backend.LibParam) string {
	if lib, kind, ok := strings.Cut(p.Obj, "."); ok {
		for l := backend.Lib(0); l <= backend.LibNpp; l++ {
			if strings.EqualFold(l.String(), lib) {
				return l.String() + " " + kind
			}
		}
	}
	return f.Lib.String() + " " + p.Obj
}

func varKey(f *backend.LibFunc, name string) string { return f.Lib.String() + " " + name }

// libRequest is the fields SparseCall, FftCall, RandCall, SolverCall, JpegCall and NppCall share, and the library of each.
func libRequest(m wire.Message) (lib backend.Lib, fn uint32, args, host []byte, ok bool) {
	switch m := m.(type) {
	case *wire.SparseCall:
		return backend.LibSparse, m.Fn, m.Args, m.Host, true
	case *wire.FftCall:
		return backend.LibFft, m.Fn, m.Args, m.Host, true
	case *wire.RandCall:
		return backend.LibRand, m.Fn, m.Args, m.Host, true
	case *wire.SolverCall:
		return backend.LibSolver, m.Fn, m.Args, m.Host, true
	case *wire.JpegCall:
		return backend.LibJpeg, m.Fn, m.Args, m.Host, true
	case *wire.NppCall:
		return backend.LibNpp, m.Fn, m.Args, m.Host, true
	}
	return 0, 0, nil, nil, false
}

// libReply answers a library call with err's result and status and, on success, the outputs.
func libReply(lib backend.Lib, outs []uint64, err error) wire.Message {
	var o [backend.MaxLibOuts]uint64
	copy(o[:], outs)
	res, st := int32(backend.ResultOf(err)), backend.LibStatusOf(lib, err)
	msg := ""
	if err != nil {
		msg = truncate(err.Error(), 1024)
	}
	switch lib {
	case backend.LibSparse:
		return &wire.SparseReply{Result: res, Status: st, Message: msg, O0: o[0], O1: o[1], O2: o[2], O3: o[3], O4: o[4],
			O5: o[5], O6: o[6], O7: o[7], O8: o[8], O9: o[9], O10: o[10], O11: o[11]}
	case backend.LibFft:
		return &wire.FftReply{Result: res, Status: st, Message: msg, O0: o[0], O1: o[1], O2: o[2], O3: o[3], O4: o[4],
			O5: o[5], O6: o[6], O7: o[7], O8: o[8], O9: o[9], O10: o[10], O11: o[11]}
	case backend.LibSolver:
		return &wire.SolverReply{Result: res, Status: st, Message: msg, O0: o[0], O1: o[1], O2: o[2], O3: o[3], O4: o[4],
			O5: o[5], O6: o[6], O7: o[7], O8: o[8], O9: o[9], O10: o[10], O11: o[11]}
	case backend.LibJpeg:
		return &wire.JpegReply{Result: res, Status: st, Message: msg, O0: o[0], O1: o[1], O2: o[2], O3: o[3], O4: o[4],
			O5: o[5], O6: o[6], O7: o[7], O8: o[8], O9: o[9], O10: o[10], O11: o[11]}
	case backend.LibNpp:
		return &wire.NppReply{Result: res, Status: st, Message: msg, O0: o[0], O1: o[1], O2: o[2], O3: o[3], O4: o[4],
			O5: o[5], O6: o[6], O7: o[7], O8: o[8], O9: o[9], O10: o[10], O11: o[11]}
	}
	return &wire.RandReply{Result: res, Status: st, Message: msg, O0: o[0], O1: o[1], O2: o[2], O3: o[3], O4: o[4],
		O5: o[5], O6: o[6], O7: o[7], O8: o[8], O9: o[9], O10: o[10], O11: o[11]}
}

// maxHostElems bounds a host input's element count (a plan's dimensions, an attribute's bytes).
const maxHostElems = 1 << 12

// libCall serves one math-library call on the current device.
func (s *Session) libCall(d *device, m wire.Message) wire.Message {
	lib, fn, args, host, _ := libRequest(m)
	call, err := d.lib.decode(lib, fn, args, host)
	if err != nil {
		return libReply(lib, nil, err)
	}
	c, ok := d.ctx.(backend.LibContext)
	if !ok {
		return libReply(lib, nil, backend.LibNotSupported(call.Func, "this backend has no %s", lib))
	}
	if lib == backend.LibFft {
		if answered, err := s.fftBefore(d, call); answered {
			return libReply(lib, nil, err)
		}
	}
	if err := d.lib.stageIn(d.ctx, call); err != nil {
		return libReply(lib, nil, err)
	}
	outs, err := c.LibCall(call)
	if err == nil && lib == backend.LibFft {
		err = s.fftAfter(d, c, call, outs)
	}
	if err == nil {
		err = stageOut(d.ctx, call)
	}
	f := call.Func
	for i, p := range f.Params {
		if p.Kind == backend.PFree {
			delete(d.lib.objs[objKind(f, p)], call.Words[i])
		}
	}
	if err != nil {
		return libReply(lib, nil, err)
	}
	if len(outs) != f.Outputs() {
		return libReply(lib, nil, fmt.Errorf("%s: backend gave %d outputs for %d: %w", f.Name, len(outs), f.Outputs(), backend.ErrUnknown))
	}
	k := 0
	for _, p := range f.Params {
		switch p.Kind {
		case backend.PNew:
			d.lib.add(objKind(f, p), outs[k])
			k++
		case backend.POut:
			d.lib.remember(f, p, outs[k])
			k++
		}
	}
	return libReply(lib, outs, nil)
}

// remember keeps an output the annotations name (r>name) or a reported host workspace size (R).
func (st *libState) remember(f *backend.LibFunc, p backend.LibParam, v uint64) {
	if p.Scratch {
		st.scratch = max(st.scratch, v)
	}
	if p.Record != "" {
		if st.vars == nil {
			st.vars = map[string]int64{}
		}
		st.vars[varKey(f, p.Record)] = int64(v)
	}
}

// rememberValue keeps a value the annotations name (v>name).
func (st *libState) rememberValue(f *backend.LibFunc, p backend.LibParam, w uint64) {
	if st.vars == nil {
		st.vars = map[string]int64{}
	}
	st.vars[varKey(f, p.Record)] = int64(w)
}

// stagedElems is a staged array's element count: its count parameter's or remembered value, plus
// its addend.
func (st *libState) stagedElems(call backend.LibCall, p backend.LibParam) int64 {
	n := int64(0)
	switch {
	case p.LenVar == "#": // a fixed count: LenAdd
	case p.LenVar != "":
		n = st.vars[varKey(call.Func, p.LenVar)]
	default:
		n = int64(call.Words[p.LenParam])
	}
	return n + int64(p.LenAdd)
}

// stageIn reads each staged host array of call from the device memory the guest staged it in
// (a synchronous copy: the guest's own copy in came before the call), so NVIDIA's function reads
// it in host memory.
func (st *libState) stageIn(ctx backend.Context, call backend.LibCall) error {
	for i, p := range call.Func.Params {
		if p.Kind != backend.PStaged || call.Words[i] == 0 {
			continue
		}
		n := st.stagedElems(call, p) * int64(p.LenUnit) // decode bounded it
		call.Host[i] = make([]byte, n)
		if n > 0 {
			if err := ctx.MemcpyDtoH(call.Host[i], call.Words[i], 0, false); err != nil {
				return fmt.Errorf("%s: staged %s: %w", call.Func.Name, p.Name, err)
			}
		}
	}
	return nil
}

// stageOut writes each staged array the function wrote back to its staging, which the guest
// copies out after the reply.
func stageOut(ctx backend.Context, call backend.LibCall) error {
	for i, p := range call.Func.Params {
		if p.Kind == backend.PStaged && p.Written && call.Words[i] != 0 && len(call.Host[i]) > 0 {
			if err := ctx.MemcpyHtoD(call.Words[i], call.Host[i], 0, false); err != nil {
				return fmt.Errorf("%s: staged %s: %w", call.Func.Name, p.Name, err)
			}
		}
	}
	return nil
}

// decode checks a call's shape against its function: a known id of this library, one word per
// parameter, each object one of the session's of its kind, host inputs exactly as long as their
// length parameter says (so NVIDIA's library never reads past them), host scalars of 1-16 bytes
// and the scalars of one call all host or all device, and no host byte left over.
func (st *libState) decode(lib backend.Lib, fn uint32, args, host []byte) (backend.LibCall, error) {
	f, ok := backend.LibFuncs[fn]
	if !ok || f.Lib != lib {
		return backend.LibCall{}, &backend.LibError{Lib: lib, Op: fmt.Sprintf("function %d", fn), Status: backend.LibStatusOf(lib, backend.ErrNotSupported),
			Detail: "not a remoted function of this library (a newer guest?)"}
	}
	if len(args) != 8*len(f.Params) {
		return backend.LibCall{}, backend.LibInvalid(f, "%d argument bytes, want %d", len(args), 8*len(f.Params))
	}
	call := backend.LibCall{Func: f, Words: make([]uint64, len(f.Params)), Host: make([][]byte, len(f.Params))}
	for i := range call.Words {
		call.Words[i] = binary.LittleEndian.Uint64(args[8*i:])
	}
	off, scalarMode := 0, -1
	take := func(i int, n uint64) error {
		if n > uint64(len(host)-off) {
			return backend.LibInvalid(f, "%s: %d host bytes, %d left", f.Params[i].Name, n, len(host)-off)
		}
		call.Host[i] = host[off : off+int(n)]
		off += int(n)
		return nil
	}
	for i, p := range f.Params {
		w := call.Words[i]
		switch p.Kind {
		case backend.PObject, backend.PFree:
			if w == 0 && p.Nullable {
				continue // NULL: NVIDIA's defaults
			}
			if !st.has(objKind(f, p), w) {
				return backend.LibCall{}, backend.LibBadObject(f, "%s: no %s %#x in this session", p.Name, p.Obj, w)
			}
		case backend.PNew:
			if err := st.room(f, objKind(f, p)); err != nil {
				return backend.LibCall{}, err
			}
		case backend.PNull:
			if w != 0 {
				return backend.LibCall{}, backend.LibInvalid(f, "%s: reserved, must be NULL", p.Name)
			}
		case backend.PStaged:
			if w == 0 {
				continue // NULL
			}
			elems := st.stagedElems(call, p)
			if elems < 0 || elems > backend.MaxStaged/int64(p.LenUnit) {
				return backend.LibCall{}, backend.LibInvalid(f, "%s: %d elements of %d bytes (at most %d bytes)", p.Name, elems, p.LenUnit, backend.MaxStaged)
			}
			// stageIn reads it from the staging once the whole call is checked.
		case backend.PHostWork:
			size := st.scratch
			if p.LenParam >= 0 {
				size = call.Words[p.LenParam]
			}
			if w != 0 && size > backend.MaxHostWork {
				return backend.LibCall{}, backend.LibInvalid(f, "%s: %d bytes of host scratch (at most %d)", p.Name, size, backend.MaxHostWork)
			}
			call.Scratch = st.scratch
		case backend.PByValue, backend.PStreamCtx:
			if w != uint64(p.LenUnit) {
				return backend.LibCall{}, backend.LibInvalid(f, "%s: %d bytes, want %d", p.Name, w, p.LenUnit)
			}
			if err := take(i, w); err != nil {
				return backend.LibCall{}, err
			}
		case backend.PHost:
			if w == 0 {
				continue // NULL
			}
			elems, counted := int64(p.LenAdd), p.Name // a fixed count
			if p.LenParam >= 0 {
				elems, counted = int64(call.Words[p.LenParam]), f.Params[p.LenParam].Name
			}
			if elems < 0 || elems > maxHostElems {
				return backend.LibCall{}, backend.LibInvalid(f, "%s: %d elements (at most %d)", counted, elems, maxHostElems)
			}
			if w != uint64(elems)*uint64(p.LenUnit) {
				return backend.LibCall{}, backend.LibInvalid(f, "%s: %d host bytes for %d elements of %d", p.Name, w, elems, p.LenUnit)
			}
			if err := take(i, w); err != nil {
				return backend.LibCall{}, err
			}
		case backend.PScalar:
			mode := 1 // device
			if w&backend.ScalarHostBit != 0 {
				mode = 0
				n := w &^ backend.ScalarHostBit
				if n < 1 || n > backend.MaxScalar {
					return backend.LibCall{}, backend.LibInvalid(f, "%s: a host scalar of %d bytes", p.Name, n)
				}
				if err := take(i, n); err != nil {
					return backend.LibCall{}, err
				}
			}
			if scalarMode >= 0 && mode != scalarMode {
				return backend.LibCall{}, backend.LibInvalid(f, "%s: host and device scalars in one call", p.Name)
			}
			scalarMode = mode
		}
	}
	if off != len(host) {
		return backend.LibCall{}, backend.LibInvalid(f, "%d host bytes left over", len(host)-off)
	}
	for i, p := range f.Params { // remembered once the whole call is accepted
		if p.Kind == backend.PValue && p.Record != "" {
			st.rememberValue(f, p, call.Words[i])
		}
	}
	return call, nil
}
