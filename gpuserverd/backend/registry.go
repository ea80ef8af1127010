package backend

import (
	"fmt"
	"sort"
	"sync"
)

// Opener creates a backend; it fails when its hardware or library is missing.
type Opener func() (Backend, error)

var (
	registryMu sync.Mutex
	registry   = map[string]Opener{}
)

// Register makes a backend kind available to Open; backend packages call it from init.
func Register(kind string, open Opener) {
	registryMu.Lock()
	defer registryMu.Unlock()
	registry[kind] = open
}

// Open creates the backend of the given kind.
func Open(kind string) (Backend, error) {
	registryMu.Lock()
	open, ok := registry[kind]
	registryMu.Unlock()
	if !ok {
		return nil, fmt.Errorf("backend: unknown kind %q (registered: %v)", kind, Kinds())
	}
	b, err := open()
	if err != nil {
		return nil, fmt.Errorf("backend %s: %w", kind, err)
	}
	return b, nil
}

// Kinds lists the registered kinds.
func Kinds() []string {
	registryMu.Lock()
	defer registryMu.Unlock()
	kinds := make([]string, 0, len(registry))
	for k := range registry {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	return kinds
}
