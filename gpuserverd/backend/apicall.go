package backend

// ArgKind is how one argument of a generically remoted driver function travels (gpuserverd/apigen).
type ArgKind uint8

const (
	ArgValue    ArgKind = iota // a scalar or enum, as is
	ArgDevice                  // a device: the worker has mapped the session's ordinal to the backend's
	ArgFunction                // a function handle of this context
	ArgStream                  // a stream handle of this context (0: the default stream)
	ArgEvent                   // an event handle of this context
	ArgOut                     // an output: 1 when the caller wants it, 0 for a NULL pointer
)

// APIFunc is one generically remoted driver function: its wire id, its name in NVIDIA's driver and
// its arguments' kinds.
type APIFunc struct {
	ID   uint32
	Name string
	// Context: it names a function, stream or event, so it acts in the current context.
	Context bool
	Args    []ArgKind
}

// APICaller is implemented by a Context that answers generic calls. APICall returns one value per
// argument (the outputs; zero for the others). A backend that does not implement f returns
// ErrNotSupported.
type APICaller interface {
	APICall(f APIFunc, args []uint64) ([]uint64, error)
}
