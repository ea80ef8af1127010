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

// Outputs counts f's output parameters.
func (f APIFunc) Outputs() int {
	n := 0
	for _, k := range f.Args {
		if k == ArgOut {
			n++
		}
	}
	return n
}

// APICaller is implemented by a Context that answers generic calls. args holds one value per
// parameter, then each output's value before the call (in the order of the outputs), which an
// output keeps when the driver leaves it alone. APICall returns one value per parameter (the
// outputs; zero for the others). A backend that does not implement f returns
// ErrNotSupported.
type APICaller interface {
	APICall(f APIFunc, args []uint64) ([]uint64, error)
}
