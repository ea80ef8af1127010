package backend

// Collectives is a backend's NCCL (NVIDIA's on the real backend, a simulated one on the simulated
// backend). A worker makes one communicator per rank its session asks for, as a native process
// would; the ranks of one communicator may be in several worker processes (an instance's
// sessions), which find each other through the unique id's bytes. A worker keeps those bytes on
// the server and never shows them to the guest.
//
// Calls come from the worker's one OS thread: NCCL's groups are per thread.
type Collectives interface {
	// NcclUniqueID is a new unique id (ncclGetUniqueId): opaque bytes naming a rendezvous.
	NcclUniqueID() ([]byte, error)
	// CommInitRank makes rank of nranks on ctx's device (ncclCommInitRank). Inside a group it
	// may return before the other ranks have joined; the group's end completes it.
	CommInitRank(ctx Context, id []byte, nranks, rank int) (Comm, error)
	// GroupStart and GroupEnd bracket calls that NCCL runs as one group.
	GroupStart() error
	GroupEnd() error
}

// Comm is one rank's communicator.
type Comm interface {
	// Post queues the rank's part of a collective (or a send or receive) on its stream and
	// returns without waiting for the other ranks.
	Post(op CollectiveOp) error
	// AsyncError is ncclCommGetAsyncError: nil, or what failed since.
	AsyncError() error
	// RedOpCreatePreMulSum makes a reduction op of this communicator (ncclRedOpCreatePreMulSum):
	// each rank's input times a scalar, then summed. The scalar is the first bytes of scalar
	// (little-endian, of datatype's size) or, with scalar nil, the value at device address dev in
	// the rank's context. RedOpDestroy frees it.
	RedOpCreatePreMulSum(datatype uint32, scalar []byte, dev uint64) (uint32, error)
	RedOpDestroy(op uint32) error
	// Split is ncclCommSplit: the ranks of one color form a new communicator ordered by key; a
	// negative color joins none (nil communicator). rank and nranks are the new communicator's.
	Split(color, key int) (c Comm, rank, nranks int, err error)
	// Finalize flushes the communicator's work (ncclCommFinalize); Close frees it
	// (ncclCommDestroy) and Abort frees it without waiting for its work (ncclCommAbort).
	Finalize() error
	Close() error
	Abort() error
}

// CollectiveOp is one rank's part of a collective. Kind, Datatype and Op are as NCCL numbers
// them (kind: 0 all-reduce, 1 broadcast, 2 reduce, 3 all-gather, 4 reduce-scatter, 5 send,
// 6 recv); Peer is the root of a broadcast or reduce, the peer of a send or receive.
type CollectiveOp struct {
	Kind, Datatype, Op uint32
	Count              uint64
	Peer               int
	Send, Recv         uint64
	Stream             Handle
}

// NcclSplitNoColor is NCCL_SPLIT_NOCOLOR: a rank that joins no new communicator.
const NcclSplitNoColor = -1

// NcclBuiltinOps is ncclNumOps: reduction ops below it are NCCL's own (sum, prod, max, min, avg).
const NcclBuiltinOps = 5

// Collective kinds.
const (
	CollAllReduce uint32 = iota
	CollBroadcast
	CollReduce
	CollAllGather
	CollReduceScatter
	CollSend
	CollRecv
)

// CollectiveNames names the kinds.
var CollectiveNames = []string{"all-reduce", "broadcast", "reduce", "all-gather", "reduce-scatter", "send", "recv"}

// PeerCopier is a context that copies straight from another context of the same backend
// (cuMemcpyPeer on a real GPU: NVLink or PCIe peer-to-peer). The copy has ended on return. A
// worker stages copies between contexts that are not one through its own memory.
type PeerCopier interface {
	MemcpyPeer(dst uint64, src Context, srcPtr, bytes uint64, stream Handle) error
}

// PrimaryContexts is a backend that can hand a worker the device's primary context rather than a
// context of its own. A worker (one session) takes primary contexts where it can: NVIDIA's
// NCCL binds them (its proxy threads and the runtime it uses know no other).
type PrimaryContexts interface {
	NewPrimaryContext(ordinal int) (Context, error)
}
