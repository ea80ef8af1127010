package worker

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/wire"
)

// NCCL through gpucloud (issue 19). The worker is a rank's process as NCCL sees it: each
// communicator the guest makes is one communicator of the backend's NCCL (NVIDIA's on a GPU) on
// the rank's device, and each collective goes to it on the rank's stream without waiting, so
// NCCL's own transports move the data between the GPUs. The ranks of one communicator may be in
// several workers: an instance's processes (one per GPU, as torchrun starts them) are separate
// sessions.
//
// A unique id the guest sees is gpucloud's: 16 random bytes naming the backend's id, which stays
// on the server in the instance's registry (ncclIDs). Any session of the same instance may join
// it; another instance's session presenting it is refused, so ranks of different instances never
// share a communicator, and the backend's id (NCCL's bootstrap address) never reaches a guest.

// ncclResult_t values.
const (
	ncclSuccess         = 0
	ncclInternalError   = 3
	ncclInvalidArgument = 4
	ncclInvalidUsage    = 5
)

// maxRanks bounds a communicator's size as the guest states it.
const maxRanks = 1 << 14

// ncclDatatypes is how many ncclDataType_t values NCCL 2.28 has (the fp8 types included).
const ncclDatatypes = 12

// ncclError is a refusal with its ncclResult_t.
type ncclError struct {
	status int32
	msg    string
}

func (e *ncclError) Error() string { return e.msg }

func ncclErr(status int32, format string, args ...any) error {
	return &ncclError{status: status, msg: fmt.Sprintf(format, args...)}
}

// ncclIDs keeps the backend ids behind the unique ids an instance's sessions issued.
type ncclIDs interface {
	register(id [16]byte, backendID []byte) error
	lookup(id [16]byte) ([]byte, error)
}

// errForeignID is the registry's answer to an id the instance was never issued.
var errForeignID = errors.New("the unique id was not issued to this instance")

// localIDs is the registry of a worker without a server's (a worker run alone, in tests): the
// session's own ids only.
type localIDs map[[16]byte][]byte

func (l localIDs) register(id [16]byte, b []byte) error { l[id] = b; return nil }
func (l localIDs) lookup(id [16]byte) ([]byte, error) {
	if b, ok := l[id]; ok {
		return b, nil
	}
	return nil, errForeignID
}

type ncclState struct {
	ids   ncclIDs
	comms map[uint64]*ncclComm
	next  uint64
	group int // depth of the guest's ncclGroupStart
}

type ncclComm struct {
	rank, nranks int
	device       *device
	c            backend.Comm
	err          error             // the first failure of a collective posted without a reply
	ops          map[uint32]uint32 // ncclRedOpCreatePreMulSum's ops -> their datatype
}

// SetNcclIDs makes unique ids the instance's, kept by the server.
func (s *Session) SetNcclIDs(ids ncclIDs) { s.comms.ids = ids }

func (s *Session) nccl(m wire.Message, noReply bool) *wire.NcclReply {
	r := &wire.NcclReply{}
	var err error
	switch m := m.(type) {
	case *wire.NcclGetUniqueId:
		r.Id0, r.Id1, err = s.ncclIssue()
	case *wire.NcclCommInit:
		r.Comm, err = s.ncclInit(m)
	case *wire.NcclCommDestroy:
		err = s.ncclEnd(m.Comm, 2)
	case *wire.NcclCommQuery:
		err = s.ncclQuery(m)
	case *wire.NcclGroup:
		err = s.ncclGroup(m.Start != 0)
	case *wire.NcclRedOp:
		r.Comm, err = s.ncclRedOp(m)
	case *wire.NcclCommSplit:
		var c *ncclComm
		r.Comm, c, err = s.ncclSplit(m)
		if c != nil {
			r.Id0, r.Id1 = uint64(c.rank), uint64(c.nranks)
		}
	case *wire.NcclCollective:
		err = s.ncclPost(m, noReply)
	}
	if err != nil {
		var ne *ncclError
		if errors.As(err, &ne) {
			r.Status = ne.status
		} else {
			r.Status = ncclInternalError
		}
		r.Message = truncate(err.Error(), 1024) // without a reply: the communicator's async error (ncclPost)
	}
	return r
}

func (s *Session) collectives() (backend.Collectives, error) {
	nb, ok := s.b.(backend.Collectives)
	if !ok {
		return nil, ncclErr(ncclInvalidUsage, "this server's %s backend has no NCCL", s.b.Kind())
	}
	return nb, nil
}

func (s *Session) ncclIssue() (uint64, uint64, error) {
	nb, err := s.collectives()
	if err != nil {
		return 0, 0, err
	}
	bid, err := nb.NcclUniqueID()
	if err != nil {
		return 0, 0, ncclErr(ncclInternalError, "ncclGetUniqueId: %v", err)
	}
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return 0, 0, fmt.Errorf("unique id: %w", err)
	}
	if s.comms.ids == nil {
		s.comms.ids = localIDs{}
	}
	if err := s.comms.ids.register(id, bid); err != nil {
		return 0, 0, ncclErr(ncclInternalError, "ncclGetUniqueId: %v", err)
	}
	return binary.LittleEndian.Uint64(id[:8]), binary.LittleEndian.Uint64(id[8:]), nil
}

func (s *Session) ncclInit(m *wire.NcclCommInit) (uint64, error) {
	nb, err := s.collectives()
	if err != nil {
		return 0, err
	}
	if m.Nranks == 0 || m.Nranks > maxRanks || m.Rank >= m.Nranks {
		return 0, ncclErr(ncclInvalidArgument, "ncclCommInitRank: rank %d of %d", m.Rank, m.Nranks)
	}
	var id [16]byte
	binary.LittleEndian.PutUint64(id[:8], m.Id0)
	binary.LittleEndian.PutUint64(id[8:], m.Id1)
	if s.comms.ids == nil {
		s.comms.ids = localIDs{}
	}
	bid, err := s.comms.ids.lookup(id)
	if err != nil {
		if errors.Is(err, errForeignID) {
			return 0, ncclErr(ncclInvalidArgument, "ncclCommInitRank: %v (ids are shared only by the sessions of one instance)", err)
		}
		return 0, ncclErr(ncclInternalError, "ncclCommInitRank: %v", err)
	}
	d, err := s.devAt(int(m.Device))
	if err != nil {
		return 0, ncclErr(ncclInvalidArgument, "ncclCommInitRank: %v", err)
	}
	c, err := nb.CommInitRank(d.ctx, bid, int(m.Nranks), int(m.Rank))
	if err != nil {
		return 0, ncclErr(ncclInternalError, "ncclCommInitRank: rank %d of %d: %v", m.Rank, m.Nranks, err)
	}
	return s.comms.add(&ncclComm{rank: int(m.Rank), nranks: int(m.Nranks), device: d, c: c}), nil
}

func (n *ncclState) add(c *ncclComm) uint64 {
	n.next++
	if n.comms == nil {
		n.comms = map[uint64]*ncclComm{}
	}
	n.comms[n.next] = c
	return n.next
}

// ncclRedOp creates a pre-multiplied sum on a communicator or destroys one.
func (s *Session) ncclRedOp(m *wire.NcclRedOp) (uint64, error) {
	c, ok := s.comms.comms[m.Comm]
	if !ok {
		return 0, ncclErr(ncclInvalidArgument, "reduction op on no communicator (%d)", m.Comm)
	}
	if m.Create == 0 {
		if _, ok := c.ops[m.Op]; !ok {
			return 0, ncclErr(ncclInvalidArgument, "ncclRedOpDestroy: op %d is not one of communicator %d's", m.Op, m.Comm)
		}
		delete(c.ops, m.Op)
		return 0, wrapNccl("ncclRedOpDestroy", c.c.RedOpDestroy(m.Op))
	}
	if m.Datatype >= ncclDatatypes || m.Residence > 1 {
		return 0, ncclErr(ncclInvalidArgument, "ncclRedOpCreatePreMulSum: datatype %d, residence %d", m.Datatype, m.Residence)
	}
	var scalar []byte
	if m.Residence == 1 { // the value itself, little-endian in the field's bytes
		scalar = binary.LittleEndian.AppendUint64(nil, m.Scalar)
	}
	op, err := c.c.RedOpCreatePreMulSum(m.Datatype, scalar, m.Scalar)
	if err != nil {
		return 0, ncclErr(ncclInvalidArgument, "ncclRedOpCreatePreMulSum: %v", err)
	}
	if c.ops == nil {
		c.ops = map[uint32]uint32{}
	}
	c.ops[op] = m.Datatype
	return uint64(op), nil
}

// ncclSplit is ncclCommSplit: the new communicator's rank is on the parent's device.
func (s *Session) ncclSplit(m *wire.NcclCommSplit) (uint64, *ncclComm, error) {
	c, ok := s.comms.comms[m.Comm]
	if !ok {
		return 0, nil, ncclErr(ncclInvalidArgument, "ncclCommSplit of no communicator (%d)", m.Comm)
	}
	color := int(m.Color)
	if color < 0 && color != backend.NcclSplitNoColor {
		return 0, nil, ncclErr(ncclInvalidArgument, "ncclCommSplit: color %d", color)
	}
	nc, rank, nranks, err := c.c.Split(color, int(m.Key))
	if err != nil {
		return 0, nil, ncclErr(ncclInternalError, "ncclCommSplit: %v", err)
	}
	if nc == nil {
		return 0, nil, nil
	}
	n := &ncclComm{rank: rank, nranks: nranks, device: c.device, c: nc}
	return s.comms.add(n), n, nil
}

func (s *Session) ncclGroup(start bool) error {
	nb, err := s.collectives()
	if err != nil {
		return err
	}
	if start {
		s.comms.group++
		return wrapNccl("ncclGroupStart", nb.GroupStart())
	}
	if s.comms.group == 0 {
		return ncclErr(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart")
	}
	s.comms.group--
	return wrapNccl("ncclGroupEnd", nb.GroupEnd())
}

func wrapNccl(what string, err error) error {
	if err == nil {
		return nil
	}
	return ncclErr(ncclInternalError, "%s: %v", what, err)
}

// ncclEnd ends a communicator: how 1 finalizes it (it stays), 2 destroys it, 3 aborts it.
func (s *Session) ncclEnd(id uint64, how int) error {
	c, ok := s.comms.comms[id]
	if !ok {
		return ncclErr(ncclInvalidArgument, "no communicator %d", id)
	}
	switch how {
	case 1:
		return wrapNccl("ncclCommFinalize", c.c.Finalize())
	case 2:
		delete(s.comms.comms, id)
		return wrapNccl("ncclCommDestroy", c.c.Close())
	default:
		delete(s.comms.comms, id)
		return wrapNccl("ncclCommAbort", c.c.Abort())
	}
}

func (s *Session) ncclQuery(m *wire.NcclCommQuery) error {
	switch m.What {
	case 0:
		c, ok := s.comms.comms[m.Comm]
		if !ok {
			return ncclErr(ncclInvalidArgument, "ncclCommGetAsyncError: no communicator %d", m.Comm)
		}
		if c.err != nil {
			return c.err
		}
		return wrapNccl("communicator", c.c.AsyncError())
	case 1:
		return s.ncclEnd(m.Comm, 1)
	case 2:
		return s.ncclEnd(m.Comm, 3)
	}
	return ncclErr(ncclInvalidArgument, "communicator query %d", m.What)
}

// ncclPost hands one rank's part to the backend's NCCL; a failure of a part sent without a reply
// is the communicator's asynchronous error.
func (s *Session) ncclPost(m *wire.NcclCollective, noReply bool) error {
	c, ok := s.comms.comms[m.Comm]
	if !ok {
		return ncclErr(ncclInvalidArgument, "collective on no communicator (%d)", m.Comm)
	}
	err := c.post(m)
	if err != nil && noReply && c.err == nil {
		c.err = err
	}
	return err
}

func (c *ncclComm) post(m *wire.NcclCollective) error {
	if int(m.Kind) >= len(backend.CollectiveNames) {
		return ncclErr(ncclInvalidArgument, "collective kind %d", m.Kind)
	}
	name := backend.CollectiveNames[m.Kind]
	switch {
	case m.Datatype >= ncclDatatypes:
		return ncclErr(ncclInvalidArgument, "%s: datatype %d", name, m.Datatype)
	case m.Op >= backend.NcclBuiltinOps && !c.hasOp(m.Op, m.Datatype):
		return ncclErr(ncclInvalidArgument, "%s: reduction op %d (not one of this communicator's for datatype %d)", name, m.Op, m.Datatype)
	case m.Peer < 0 || int(m.Peer) >= c.nranks:
		return ncclErr(ncclInvalidArgument, "%s: root/peer %d of %d ranks", name, m.Peer, c.nranks)
	case m.Count > 1<<40:
		return ncclErr(ncclInvalidArgument, "%s: count %d", name, m.Count)
	}
	err := c.c.Post(backend.CollectiveOp{Kind: m.Kind, Datatype: m.Datatype, Op: m.Op, Count: m.Count, Peer: int(m.Peer),
		Send: m.Send, Recv: m.Recv, Stream: backend.Handle(m.Stream)})
	if err != nil {
		return ncclErr(ncclInternalError, "%s: %v", name, err)
	}
	return nil
}

func (c *ncclComm) hasOp(op, datatype uint32) bool {
	dt, ok := c.ops[op]
	return ok && dt == datatype
}

// closeNccl frees the session's communicators when it ends.
func (s *Session) closeNccl() {
	for id, c := range s.comms.comms {
		if err := c.c.Abort(); err != nil {
			s.log.Warn("aborting an NCCL communicator at the session's end", "comm", id, "err", err)
		}
	}
	s.comms.comms = nil
}
