package worker

import (
	"encoding/binary"
	"fmt"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/wire"
)

// dnnState is a device's cuDNN handles and backend descriptors: the ids this session made. An id
// is looked up here before the backend sees it, so another session's (or a made-up) id is
// refused, never translated.
type dnnState struct {
	handles map[backend.Handle]bool
	descs   map[backend.Handle]bool
}

func isDnn(m wire.Message) bool {
	switch m.(type) {
	case *wire.DnnCreate, *wire.DnnDestroy, *wire.DnnSetStream, *wire.DnnDescCreate, *wire.DnnDescDestroy,
		*wire.DnnSetAttribute, *wire.DnnGetAttribute, *wire.DnnFinalize, *wire.DnnExecute, *wire.DnnLegacy,
		*wire.DnnExecutePack:
		return true
	}
	return false
}

func dnnReply(v uint64, err error) *wire.DnnReply {
	r := &wire.DnnReply{Result: int32(backend.ResultOf(err)), Status: int32(backend.DnnStatusOf(err)), Value: v}
	if err != nil {
		r.Message = truncate(err.Error(), 1024)
	}
	return r
}

func dnnBad(op string, st backend.DnnStatus, f string, a ...any) error {
	return &backend.DnnError{Op: op, Status: st, Detail: fmt.Sprintf(f, a...)}
}

// dnn serves one cuDNN request on the current device.
func (s *Session) dnn(d *device, m wire.Message) *wire.DnnReply {
	c, ok := d.ctx.(backend.DnnContext)
	if !ok {
		return dnnReply(0, dnnBad("cudnn", backend.DnnNotSupported, "this backend has no cuDNN"))
	}
	if d.dnn.handles == nil {
		d.dnn = dnnState{handles: map[backend.Handle]bool{}, descs: map[backend.Handle]bool{}}
	}
	st := &d.dnn
	switch m := m.(type) {
	case *wire.DnnCreate:
		h, err := c.DnnCreate()
		if err == nil {
			st.handles[h] = true
		}
		return dnnReply(uint64(h), err)
	case *wire.DnnDestroy:
		h := backend.Handle(m.Handle)
		if err := st.handle(h); err != nil {
			return dnnReply(0, err)
		}
		delete(st.handles, h)
		return dnnReply(0, c.DnnDestroy(h))
	case *wire.DnnSetStream:
		if err := st.handle(backend.Handle(m.Handle)); err != nil {
			return dnnReply(0, err)
		}
		return dnnReply(0, c.DnnSetStream(backend.Handle(m.Handle), backend.Handle(m.Stream)))
	case *wire.DnnDescCreate:
		h, err := c.DnnDescCreate(m.Kind)
		if err == nil {
			st.descs[h] = true
		}
		return dnnReply(uint64(h), err)
	case *wire.DnnDescDestroy:
		h := backend.Handle(m.Desc)
		if err := st.desc(h); err != nil {
			return dnnReply(0, err)
		}
		delete(st.descs, h)
		return dnnReply(0, c.DnnDescDestroy(h))
	case *wire.DnnSetAttribute:
		a, err := st.decodeAttr(m)
		if err == nil {
			err = c.DnnSetAttribute(backend.Handle(m.Desc), a)
		}
		return dnnReply(0, err)
	case *wire.DnnGetAttribute:
		return st.getAttr(c, m)
	case *wire.DnnFinalize:
		if err := st.desc(backend.Handle(m.Desc)); err != nil {
			return dnnReply(0, err)
		}
		return dnnReply(0, c.DnnFinalize(backend.Handle(m.Desc)))
	case *wire.DnnExecute:
		err := st.handle(backend.Handle(m.Handle))
		if err == nil {
			err = st.desc(backend.Handle(m.Plan))
		}
		if err == nil {
			err = st.desc(backend.Handle(m.Pack))
		}
		if err == nil {
			err = c.DnnExecute(backend.Handle(m.Handle), backend.Handle(m.Plan), backend.Handle(m.Pack))
		}
		return dnnReply(0, err)
	case *wire.DnnExecutePack:
		return dnnReply(0, st.executePack(c, m))
	case *wire.DnnLegacy:
		call, err := st.decodeLegacy(m)
		if err != nil {
			return dnnReply(0, err)
		}
		res, err := c.DnnLegacy(call)
		r := dnnReply(res.Value, err)
		b := make([]byte, 0, 128)
		for _, w := range res.Data {
			b = binary.LittleEndian.AppendUint64(b, w)
		}
		putData(r, b)
		return r
	}
	return dnnReply(0, fmt.Errorf("not a cuDNN request: %w", backend.ErrInvalidValue))
}

func (st *dnnState) handle(h backend.Handle) error {
	if !st.handles[h] {
		return dnnBad("handle", backend.DnnBadParam, "no cuDNN handle %d in this session", h)
	}
	return nil
}

func (st *dnnState) desc(h backend.Handle) error {
	if !st.descs[h] {
		return dnnBad("descriptor", backend.DnnBadParam, "no cuDNN backend descriptor %d in this session", h)
	}
	return nil
}

// decodeAttr checks a SetAttribute: the descriptor the session's, the type known, the bytes
// exactly count elements of it, and every descriptor- or handle-typed element one of the
// session's ids.
func (st *dnnState) decodeAttr(m *wire.DnnSetAttribute) (backend.DnnAttr, error) {
	const op = "cudnnBackendSetAttribute"
	if err := st.desc(backend.Handle(m.Desc)); err != nil {
		return backend.DnnAttr{}, err
	}
	size, ok := backend.DnnElemSize(m.Kind)
	if !ok {
		return backend.DnnAttr{}, dnnBad(op, backend.DnnBadParamType, "attribute type %d", m.Kind)
	}
	if m.Count > backend.DnnMaxElems {
		return backend.DnnAttr{}, dnnBad(op, backend.DnnBadParam, "count %d > %d elements", m.Count, backend.DnnMaxElems)
	}
	if uint64(len(m.Elems)) != uint64(m.Count)*uint64(size) {
		return backend.DnnAttr{}, dnnBad(op, backend.DnnBadParam, "elems: %d bytes for %d elements of %d bytes", len(m.Elems), m.Count, size)
	}
	a := backend.DnnAttr{Name: m.Name, Type: m.Kind, Count: int(m.Count), Elems: m.Elems}
	if err := st.checkIDs(op, m.Kind, a.IDs); err != nil {
		return backend.DnnAttr{}, err
	}
	return a, nil
}

// checkIDs refuses a descriptor- or handle-typed element that is not the session's.
func (st *dnnState) checkIDs(op string, typ uint32, ids func() []backend.Handle) error {
	var check func(backend.Handle) error
	switch typ {
	case backend.DnnTypeDescriptor:
		check = st.desc
	case backend.DnnTypeHandle:
		check = st.handle
	default:
		return nil
	}
	for i, id := range ids() {
		if err := check(id); err != nil {
			return dnnBad(op, backend.DnnBadParam, "element %d: %v", i, err)
		}
	}
	return nil
}

// getAttr answers a GetAttribute with the attribute's count and the chunk of its elements from
// m.Offset on that fits the reply's 128 bytes.
func (st *dnnState) getAttr(c backend.DnnContext, m *wire.DnnGetAttribute) *wire.DnnReply {
	const op = "cudnnBackendGetAttribute"
	if err := st.desc(backend.Handle(m.Desc)); err != nil {
		return dnnReply(0, err)
	}
	size, ok := backend.DnnElemSize(m.Kind)
	if !ok {
		return dnnReply(0, dnnBad(op, backend.DnnBadParamType, "attribute type %d", m.Kind))
	}
	if m.Requested > backend.DnnMaxElems || m.Offset > m.Requested {
		return dnnReply(0, dnnBad(op, backend.DnnBadParam, "requested %d, offset %d", m.Requested, m.Offset))
	}
	var in []backend.Handle
	if m.Kind == backend.DnnTypeDescriptor {
		if uint64(len(m.Elems)) != uint64(m.Requested)*8 {
			return dnnReply(0, dnnBad(op, backend.DnnBadParam, "elems: %d bytes for %d descriptors", len(m.Elems), m.Requested))
		}
		a := backend.DnnAttr{Count: int(m.Requested), Elems: m.Elems}
		in = a.IDs()
		if err := st.checkIDs(op, m.Kind, func() []backend.Handle { return in }); err != nil {
			return dnnReply(0, err)
		}
	}
	n, elems, err := c.DnnGetAttribute(backend.Handle(m.Desc), m.Name, m.Kind, int(m.Requested), in)
	r := dnnReply(uint64(n), err)
	if err == nil && m.Kind != backend.DnnTypeDescriptor {
		from := int(m.Offset) * size
		if from < len(elems) {
			putData(r, elems[from:])
		}
	}
	return r
}

// putData copies up to 128 bytes into the reply's data words, little-endian.
func putData(r *wire.DnnReply, b []byte) {
	var buf [128]byte
	copy(buf[:], b)
	words := []*uint64{&r.D0, &r.D1, &r.D2, &r.D3, &r.D4, &r.D5, &r.D6, &r.D7, &r.D8, &r.D9, &r.D10,
		&r.D11, &r.D12, &r.D13, &r.D14, &r.D15}
	for i, w := range words {
		*w = binary.LittleEndian.Uint64(buf[i*8:])
	}
}

// decodeLegacy checks a legacy call's shape: a known op on one of the session's handles (none
// for the dropout size), whole descriptors of known kinds, whole argument words.
func (st *dnnState) decodeLegacy(m *wire.DnnLegacy) (backend.DnnLegacyCall, error) {
	const op = "cudnn legacy call"
	if m.Op < backend.DnnOpConvForward || m.Op > backend.DnnOpBatchNormBackward {
		return backend.DnnLegacyCall{}, dnnBad(op, backend.DnnNotSupported, "op %d", m.Op)
	}
	if m.Op != backend.DnnOpDropoutStatesSize {
		if err := st.handle(backend.Handle(m.Handle)); err != nil {
			return backend.DnnLegacyCall{}, err
		}
	}
	if len(m.Descs)%backend.DnnDescSize != 0 || len(m.Args)%8 != 0 {
		return backend.DnnLegacyCall{}, dnnBad(op, backend.DnnBadParam, "descs %d bytes, args %d bytes: not whole", len(m.Descs), len(m.Args))
	}
	call := backend.DnnLegacyCall{Op: m.Op, Handle: backend.Handle(m.Handle)}
	for off := 0; off < len(m.Descs); off += backend.DnnDescSize {
		var d backend.DnnDesc
		for i := range d {
			d[i] = int32(binary.LittleEndian.Uint32(m.Descs[off+4*i:]))
		}
		if d.Kind() < backend.DnnDescTensor || d.Kind() > backend.DnnDescActivation {
			return backend.DnnLegacyCall{}, dnnBad(op, backend.DnnBadParam, "descriptor %d: kind %d", off/backend.DnnDescSize, d.Kind())
		}
		call.Descs = append(call.Descs, d)
	}
	for off := 0; off < len(m.Args); off += 8 {
		call.Args = append(call.Args, binary.LittleEndian.Uint64(m.Args[off:]))
	}
	return call, nil
}
