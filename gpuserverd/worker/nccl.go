package worker

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/wire"
)

// NCCL through gpucloud (issue 19): gpucloud's libnccl.so.2 asks the worker for unique ids and
// communicators and posts each rank's part of a collective; once every rank of a communicator
// has posted, the worker runs the collective over the ranks' device memory. The ids and
// communicators live in this session only: another session (another instance's, or another
// process's) cannot name them, so ranks of different instances never share a communicator.
//
// The collective itself is staged through the worker's memory (each rank's buffer read, reduced
// here, written back): exact on the simulated backend and correct on any backend; NVIDIA's NCCL
// on the real backend is the NcclRunner seam (see docs/multi-gpu.md).

// maxStagedCollective bounds the worker memory one staged collective takes (every rank's
// buffers at once), so a guest's count cannot make the worker allocate without limit.
const maxStagedCollective = 2 << 30

// ncclResult_t values.
const (
	ncclSuccess         = 0
	ncclInternalError   = 3
	ncclInvalidArgument = 4
	ncclInvalidUsage    = 5
)

// Collective kinds as NcclCollective's kind field carries them.
const (
	collAllReduce = iota
	collBroadcast
	collReduce
	collAllGather
	collReduceScatter
	collSend
	collRecv
)

var collNames = []string{"all-reduce", "broadcast", "reduce", "all-gather", "reduce-scatter", "send", "recv"}

// ncclError is a refusal with its ncclResult_t.
type ncclError struct {
	status int32
	msg    string
}

func (e *ncclError) Error() string { return e.msg }

func ncclErr(status int32, format string, args ...any) error {
	return &ncclError{status: status, msg: fmt.Sprintf(format, args...)}
}

type ncclState struct {
	issued map[[2]uint64]*clique // unique ids issued to this session -> their communicator's ranks
	comms  map[uint64]*ncclComm
	next   uint64
}

// clique is the ranks built from one unique id.
type clique struct {
	nranks  int
	ranks   []*ncclComm
	pending [][]*wire.NcclCollective // per rank, the collectives posted and not yet run
	p2p     []*wire.NcclCollective   // sends and receives waiting for their other side
	devices map[int]bool
	native  backend.Clique // the backend's NCCL over the ranks, once all joined; nil: staged here
}

type ncclComm struct {
	id     uint64
	rank   int
	device *device
	cl     *clique
}

func (s *Session) nccl(m wire.Message) *wire.NcclReply {
	r := &wire.NcclReply{}
	var err error
	switch m := m.(type) {
	case *wire.NcclGetUniqueId:
		r.Id0, r.Id1, err = s.comms.issue()
	case *wire.NcclCommInit:
		r.Comm, err = s.ncclInit(m)
	case *wire.NcclCommDestroy:
		err = s.comms.destroy(m.Comm)
	case *wire.NcclCollective:
		err = s.ncclPost(m)
	}
	if err != nil {
		var ne *ncclError
		if errors.As(err, &ne) {
			r.Status = ne.status
		} else {
			r.Status = ncclInternalError
		}
		r.Message = truncate(err.Error(), 1024)
	}
	return r
}

func (n *ncclState) issue() (uint64, uint64, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return 0, 0, fmt.Errorf("unique id: %w", err)
	}
	if n.issued == nil {
		n.issued = map[[2]uint64]*clique{}
	}
	id := [2]uint64{binary.LittleEndian.Uint64(b[:8]), binary.LittleEndian.Uint64(b[8:])}
	n.issued[id] = nil
	return id[0], id[1], nil
}

func (s *Session) ncclInit(m *wire.NcclCommInit) (uint64, error) {
	n := &s.comms
	cl, ok := n.issued[[2]uint64{m.Id0, m.Id1}]
	if !ok {
		return 0, ncclErr(ncclInvalidArgument, "ncclCommInitRank: the unique id was not issued to this session (ids are not shared between sessions)")
	}
	if m.Nranks == 0 || int(m.Nranks) > len(s.devs) {
		return 0, ncclErr(ncclInvalidArgument, "ncclCommInitRank: nranks %d (the session has %d GPUs, one rank each at most)", m.Nranks, len(s.devs))
	}
	if m.Rank >= m.Nranks {
		return 0, ncclErr(ncclInvalidArgument, "ncclCommInitRank: rank %d of %d", m.Rank, m.Nranks)
	}
	if cl == nil {
		cl = &clique{nranks: int(m.Nranks), ranks: make([]*ncclComm, m.Nranks),
			pending: make([][]*wire.NcclCollective, m.Nranks), devices: map[int]bool{}}
		n.issued[[2]uint64{m.Id0, m.Id1}] = cl
	}
	switch {
	case cl.nranks != int(m.Nranks):
		return 0, ncclErr(ncclInvalidArgument, "ncclCommInitRank: nranks %d, but the id's communicator has %d", m.Nranks, cl.nranks)
	case cl.ranks[m.Rank] != nil:
		return 0, ncclErr(ncclInvalidUsage, "ncclCommInitRank: rank %d already joined", m.Rank)
	case cl.devices[int(m.Device)]:
		return 0, ncclErr(ncclInvalidUsage, "ncclCommInitRank: device %d already has a rank of this communicator", m.Device)
	}
	d, err := s.devAt(int(m.Device))
	if err != nil {
		return 0, ncclErr(ncclInvalidArgument, "ncclCommInitRank: %v", err)
	}
	n.next++
	c := &ncclComm{id: n.next, rank: int(m.Rank), device: d, cl: cl}
	if n.comms == nil {
		n.comms = map[uint64]*ncclComm{}
	}
	n.comms[c.id] = c
	cl.ranks[m.Rank] = c
	cl.devices[int(m.Device)] = true
	s.nativeClique(cl)
	return c.id, nil
}

// nativeClique hands a clique whose ranks have all joined to the backend's NCCL where it has one;
// where that fails the collectives are staged through the worker, as on a backend without NCCL.
func (s *Session) nativeClique(cl *clique) {
	nb, ok := s.b.(backend.Collectives)
	if !ok {
		return
	}
	ctxs := make([]backend.Context, cl.nranks)
	for r, c := range cl.ranks {
		if c == nil {
			return
		}
		ctxs[r] = c.device.ctx
	}
	native, err := nb.CommInitAll(ctxs)
	if err != nil {
		s.log.Warn("backend NCCL unavailable; collectives staged through the worker", "ranks", cl.nranks, "err", err)
		return
	}
	cl.native = native
}

func (n *ncclState) destroy(id uint64) error {
	c, ok := n.comms[id]
	if !ok {
		return ncclErr(ncclInvalidArgument, "ncclCommDestroy: no communicator %d", id)
	}
	delete(n.comms, id)
	cl := c.cl
	cl.ranks[c.rank] = nil
	cl.pending[c.rank] = nil
	if cl.native != nil { // NCCL's communicators go with the first rank: the clique is broken
		native := cl.native
		cl.native = nil
		if err := native.Close(); err != nil {
			return ncclErr(ncclInternalError, "ncclCommDestroy: %v", err)
		}
	}
	return nil
}

// ncclPost queues one rank's part and runs whatever collectives every rank has now posted.
func (s *Session) ncclPost(m *wire.NcclCollective) error {
	c, ok := s.comms.comms[m.Comm]
	if !ok {
		return ncclErr(ncclInvalidArgument, "collective on no communicator (%d)", m.Comm)
	}
	if err := checkCollective(m, c.cl.nranks); err != nil {
		return err
	}
	cl := c.cl
	if m.Kind == collSend || m.Kind == collRecv {
		return s.ncclP2P(c, m)
	}
	cl.pending[c.rank] = append(cl.pending[c.rank], m)
	for {
		heads := make([]*wire.NcclCollective, cl.nranks)
		for r := range heads {
			if cl.ranks[r] == nil || len(cl.pending[r]) == 0 {
				return nil // a rank has not posted yet: runs when it does
			}
			heads[r] = cl.pending[r][0]
		}
		for r := range heads {
			cl.pending[r] = cl.pending[r][1:]
		}
		if err := s.runCollective(cl, heads); err != nil {
			return err
		}
	}
}

func checkCollective(m *wire.NcclCollective, nranks int) error {
	if int(m.Kind) >= len(collNames) {
		return ncclErr(ncclInvalidArgument, "collective kind %d", m.Kind)
	}
	if _, ok := elemSizes[m.Datatype]; !ok {
		return ncclErr(ncclInvalidArgument, "%s: datatype %d not supported", collNames[m.Kind], m.Datatype)
	}
	if m.Op > opAvg {
		return ncclErr(ncclInvalidArgument, "%s: reduction op %d not supported", collNames[m.Kind], m.Op)
	}
	if m.Peer < 0 || int(m.Peer) >= nranks {
		return ncclErr(ncclInvalidArgument, "%s: root/peer %d of %d ranks", collNames[m.Kind], m.Peer, nranks)
	}
	if m.Count > 1<<34 {
		return ncclErr(ncclInvalidArgument, "%s: count %d", collNames[m.Kind], m.Count)
	}
	return nil
}

// runCollective runs one collective whose parts (heads, by rank) every rank has posted.
func (s *Session) runCollective(cl *clique, heads []*wire.NcclCollective) error {
	h0 := heads[0]
	for r, h := range heads {
		if h.Kind != h0.Kind || h.Count != h0.Count || h.Datatype != h0.Datatype || h.Op != h0.Op || h.Peer != h0.Peer {
			return ncclErr(ncclInvalidUsage, "ranks disagree: rank 0 posted %s of %d (type %d, op %d, root %d), rank %d %s of %d (type %d, op %d, root %d)",
				collNames[h0.Kind], h0.Count, h0.Datatype, h0.Op, h0.Peer, r, collNames[h.Kind], h.Count, h.Datatype, h.Op, h.Peer)
		}
	}
	if cl.native != nil {
		c := backend.Collective{Kind: h0.Kind, Datatype: h0.Datatype, Op: h0.Op, Count: h0.Count, Root: int(h0.Peer)}
		for _, h := range heads {
			c.Parts = append(c.Parts, backend.CollectivePart{Send: h.Send, Recv: h.Recv, Stream: backend.Handle(h.Stream)})
		}
		if err := cl.native.Run(c); err != nil {
			return ncclErr(ncclInternalError, "%s: %v", collNames[h0.Kind], err)
		}
		return nil
	}
	es := uint64(elemSizes[h0.Datatype])
	n, nr := h0.Count*es, uint64(cl.nranks)
	if staged := n * nr * nr; staged > maxStagedCollective {
		return ncclErr(ncclInvalidArgument, "%s of %d bytes a rank: more than a staged collective holds (%d bytes in all)",
			collNames[h0.Kind], n, maxStagedCollective)
	}
	read := func(r int, ptr, bytes uint64) ([]byte, error) {
		b := make([]byte, bytes)
		d := cl.ranks[r].device
		err := d.ctx.MemcpyDtoH(b, ptr, backend.Handle(heads[r].Stream), false)
		return b, wrapRank(err, r, "reading")
	}
	write := func(r int, ptr uint64, b []byte) error {
		d := cl.ranks[r].device
		return wrapRank(d.ctx.MemcpyHtoD(ptr, b, backend.Handle(heads[r].Stream), false), r, "writing")
	}
	gather := func(bytes uint64) ([][]byte, error) {
		in := make([][]byte, cl.nranks)
		for r := range in {
			var err error
			if in[r], err = read(r, heads[r].Send, bytes); err != nil {
				return nil, err
			}
		}
		return in, nil
	}
	switch h0.Kind {
	case collAllReduce, collReduce:
		in, err := gather(n)
		if err != nil {
			return err
		}
		out := reduce(in, h0.Datatype, h0.Op)
		for r := range heads {
			if h0.Kind == collAllReduce || r == int(h0.Peer) {
				if err := write(r, heads[r].Recv, out); err != nil {
					return err
				}
			}
		}
	case collBroadcast:
		b, err := read(int(h0.Peer), heads[h0.Peer].Send, n)
		if err != nil {
			return err
		}
		for r := range heads {
			if err := write(r, heads[r].Recv, b); err != nil {
				return err
			}
		}
	case collAllGather:
		in, err := gather(n)
		if err != nil {
			return err
		}
		out := make([]byte, 0, n*nr)
		for _, b := range in {
			out = append(out, b...)
		}
		for r := range heads {
			if err := write(r, heads[r].Recv, out); err != nil {
				return err
			}
		}
	case collReduceScatter:
		in, err := gather(n * nr)
		if err != nil {
			return err
		}
		out := reduce(in, h0.Datatype, h0.Op)
		for r := range heads {
			if err := write(r, heads[r].Recv, out[uint64(r)*n:uint64(r+1)*n]); err != nil {
				return err
			}
		}
	}
	return nil
}

// ncclP2P pairs a send with its receive (in the order posted) and copies when both are there.
func (s *Session) ncclP2P(c *ncclComm, m *wire.NcclCollective) error {
	cl := c.cl
	// The other side: a recv at m.Peer from c.rank for a send, a send from m.Peer to c.rank for a recv.
	want := uint32(collRecv)
	if m.Kind == collRecv {
		want = collSend
	}
	for i, o := range cl.p2p {
		oc := s.comms.comms[o.Comm]
		if oc == nil || o.Kind != want || oc.rank != int(m.Peer) || int(o.Peer) != c.rank {
			continue
		}
		cl.p2p = append(cl.p2p[:i], cl.p2p[i+1:]...)
		send, recv, sc, rc := m, o, c, oc
		if m.Kind == collRecv {
			send, recv, sc, rc = o, m, oc, c
		}
		if send.Count != recv.Count || send.Datatype != recv.Datatype {
			return ncclErr(ncclInvalidUsage, "send of %d (type %d) from rank %d, recv of %d (type %d) at rank %d",
				send.Count, send.Datatype, sc.rank, recv.Count, recv.Datatype, rc.rank)
		}
		if err := sc.device.ctx.StreamSynchronize(backend.Handle(send.Stream)); err != nil {
			return wrapRank(err, sc.rank, "send")
		}
		if err := rc.device.ctx.StreamSynchronize(backend.Handle(recv.Stream)); err != nil {
			return wrapRank(err, rc.rank, "recv")
		}
		return s.copyBetween(rc.device, recv.Recv, sc.device, send.Send, send.Count*uint64(elemSizes[send.Datatype]))
	}
	cl.p2p = append(cl.p2p, m)
	return nil
}

func wrapRank(err error, rank int, what string) error {
	if err == nil {
		return nil
	}
	return ncclErr(ncclInvalidArgument, "rank %d %s its buffer: %v", rank, what, err)
}
