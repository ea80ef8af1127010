package worker

import (
	"encoding/binary"
	"fmt"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/wire"
)

// cuBLASLt requests (wire ids 8000-8499). Descriptors, layouts and preferences arrive whole, as
// attribute lists checked by backend.ParseLtObject; handles share the device's cuBLAS table.

func isLt(m wire.Message) bool {
	switch m.(type) {
	case *wire.LtCreate, *wire.LtHeuristic, *wire.LtMatmul, *wire.LtGetAttribute:
		return true
	}
	return false
}

// ltFailed is the reply a cuBLASLt request gets when it fails before reaching the backend.
func ltFailed(m wire.Message, err error) wire.Message {
	switch m.(type) {
	case *wire.LtHeuristic:
		return heuristicReply(nil, err)
	case *wire.LtGetAttribute:
		return attributeReply(nil, 0, err)
	}
	return blasReply(0, err)
}

func heuristicReply(rs []backend.LtResult, err error) *wire.LtHeuristicReply {
	r := &wire.LtHeuristicReply{Result: int32(backend.ResultOf(err)), Status: int32(backend.BlasStatusOf(err))}
	if err != nil {
		r.Message = truncate(err.Error(), 1024)
		return r
	}
	rs = rs[:min(len(rs), backend.MaxLtResults)]
	r.Count = uint32(len(rs))
	for i, res := range rs {
		algo, ws, state, waves := resultFields(r, i)
		for w := range algo {
			*algo[w] = res.Algo[w]
		}
		*ws, *state, *waves = res.Workspace, int32(res.State), res.Waves
	}
	return r
}

// resultFields are the reply's fields of result i (the wire carries results as fixed fields).
func resultFields(r *wire.LtHeuristicReply, i int) (algo [8]*uint64, ws *uint64, state *int32, waves *float32) {
	switch i {
	case 0:
		return [8]*uint64{&r.Algo0W0, &r.Algo0W1, &r.Algo0W2, &r.Algo0W3, &r.Algo0W4, &r.Algo0W5, &r.Algo0W6, &r.Algo0W7},
			&r.Workspace0, &r.State0, &r.Waves0
	case 1:
		return [8]*uint64{&r.Algo1W0, &r.Algo1W1, &r.Algo1W2, &r.Algo1W3, &r.Algo1W4, &r.Algo1W5, &r.Algo1W6, &r.Algo1W7},
			&r.Workspace1, &r.State1, &r.Waves1
	case 2:
		return [8]*uint64{&r.Algo2W0, &r.Algo2W1, &r.Algo2W2, &r.Algo2W3, &r.Algo2W4, &r.Algo2W5, &r.Algo2W6, &r.Algo2W7},
			&r.Workspace2, &r.State2, &r.Waves2
	}
	return [8]*uint64{&r.Algo3W0, &r.Algo3W1, &r.Algo3W2, &r.Algo3W3, &r.Algo3W4, &r.Algo3W5, &r.Algo3W6, &r.Algo3W7},
		&r.Workspace3, &r.State3, &r.Waves3
}

func attributeReply(v []byte, size uint64, err error) *wire.LtAttributeReply {
	r := &wire.LtAttributeReply{Result: int32(backend.ResultOf(err)), Status: int32(backend.BlasStatusOf(err)), Size: size}
	if err != nil {
		r.Message = truncate(err.Error(), 1024)
		return r
	}
	var b [8]byte
	copy(b[:], v)
	r.Value = binary.LittleEndian.Uint64(b[:])
	return r
}

// ltObjects parses attribute lists, naming the one that fails.
func ltObjects(kinds []backend.LtKind, names []string, raw ...[]byte) ([]backend.LtObject, error) {
	obs := make([]backend.LtObject, len(raw))
	for i, b := range raw {
		o, err := backend.ParseLtObject(kinds[i], b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", names[i], err)
		}
		obs[i] = o
	}
	return obs, nil
}

var (
	heuristicKinds = []backend.LtKind{backend.LtMatmulDesc, backend.LtMatrixLayout, backend.LtMatrixLayout,
		backend.LtMatrixLayout, backend.LtMatrixLayout, backend.LtPreference}
	heuristicNames = []string{"desc", "a", "b", "c", "d", "pref"}
	matmulNames    = []string{"desc", "adesc", "bdesc", "cdesc", "ddesc"}
)

// lt serves one cuBLASLt request on the current device.
func (s *Session) lt(d *device, m wire.Message) wire.Message {
	if d.blas.own == nil {
		d.blas = blasState{own: map[backend.Handle]uint64{}}
	}
	c := d.ctx
	switch m := m.(type) {
	case *wire.LtCreate:
		h, err := c.LtCreate()
		if err == nil {
			d.blas.own[h] = 0 // no workspace of the worker's: each matmul names one
		}
		return blasReply(h, err)
	case *wire.LtHeuristic:
		obs, err := ltObjects(heuristicKinds, heuristicNames, m.Desc, m.A, m.B, m.C, m.D, m.Pref)
		if err != nil {
			return heuristicReply(nil, err)
		}
		if m.Requested < 1 {
			return heuristicReply(nil, &backend.BlasError{Op: "cublasLtMatmulAlgoGetHeuristic", Status: backend.BlasInvalidValue, Detail: "requested 0 results"})
		}
		rs, err := c.LtHeuristic(backend.LtQuery{Handle: backend.Handle(m.Handle), Desc: obs[0], A: obs[1], B: obs[2],
			C: obs[3], D: obs[4], Pref: obs[5], Requested: int(min(m.Requested, backend.MaxLtResults))})
		return heuristicReply(rs, err)
	case *wire.LtMatmul:
		return blasReply(0, s.ltMatmul(d, m))
	case *wire.LtGetAttribute:
		if m.Kind > uint32(backend.LtPreference) {
			return attributeReply(nil, 0, &backend.BlasError{Op: "cuBLASLt get attribute", Status: backend.BlasInvalidValue, Detail: fmt.Sprintf("kind %d", m.Kind)})
		}
		o, err := backend.ParseLtObject(backend.LtKind(m.Kind), m.Object)
		if err != nil {
			return attributeReply(nil, 0, err)
		}
		v, n, err := c.LtGetAttribute(o, m.Attribute, m.Size)
		return attributeReply(v, n, err)
	}
	return blasReply(0, fmt.Errorf("not a cuBLASLt request: %w", backend.ErrInvalidValue))
}

func (s *Session) ltMatmul(d *device, m *wire.LtMatmul) error {
	obs, err := ltObjects(heuristicKinds[:5], matmulNames, m.Desc, m.Adesc, m.Bdesc, m.Cdesc, m.Ddesc)
	if err != nil {
		return err
	}
	mm := backend.LtMatmul{Handle: backend.Handle(m.Handle), Desc: obs[0], Alpha: m.Alpha, Beta: m.Beta,
		A: m.A, B: m.B, C: m.C, D: m.D, ADesc: obs[1], BDesc: obs[2], CDesc: obs[3], DDesc: obs[4],
		Workspace: m.Workspace, WorkspaceSize: m.WorkspaceSize, Stream: backend.Handle(m.Stream)}
	switch len(m.Algo) {
	case 0:
	case 64:
		var a [8]uint64
		for i := range a {
			a[i] = binary.LittleEndian.Uint64(m.Algo[8*i:])
		}
		mm.Algo = &a
	default:
		return &backend.BlasError{Op: "cublasLtMatmul", Status: backend.BlasInvalidValue, Detail: fmt.Sprintf("algo of %d bytes, want 64", len(m.Algo))}
	}
	if m.WorkspaceSize > 0 && !d.within(m.Workspace, m.WorkspaceSize) {
		return &backend.BlasError{Op: "cublasLtMatmul", Status: backend.BlasInvalidValue,
			Detail: fmt.Sprintf("workspace [%#x, +%d) is not inside one of the session's allocations", m.Workspace, m.WorkspaceSize)}
	}
	return d.ctx.LtMatmul(mm)
}
