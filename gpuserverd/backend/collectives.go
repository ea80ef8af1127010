package backend

// Collectives is a backend's NCCL: communicators over contexts of one worker process (NVIDIA's
// NCCL on the real backend). A backend without it has its collectives run by the worker, staged
// through the worker's memory (the simulated backend's case).
type Collectives interface {
	// CommInitAll makes one communicator per context, rank i on ctxs[i].
	CommInitAll(ctxs []Context) (Clique, error)
}

// Clique is the communicators of one CommInitAll.
type Clique interface {
	// Run runs one collective: every rank's part at once (one NCCL group).
	Run(c Collective) error
	Close() error
}

// Collective is one collective over a clique. Kind, Datatype and Op are as NCCL numbers them
// (kind: 0 all-reduce, 1 broadcast, 2 reduce, 3 all-gather, 4 reduce-scatter); Root is the root
// rank of a broadcast or reduce.
type Collective struct {
	Kind, Datatype, Op uint32
	Count              uint64
	Root               int
	Parts              []CollectivePart // by rank
}

// CollectivePart is one rank's buffers and stream.
type CollectivePart struct {
	Send, Recv uint64
	Stream     Handle
}
