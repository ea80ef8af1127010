package sim

import (
	"sort"

	"gpucloud/gpuserverd/backend"
)

// families is a context's state of the hand-written driver-API families (issue 14): virtual
// memory, pools, arrays, textures, graphs. Guarded by Context.mu.
type families struct {
	reservations map[uint64]uint64 // base -> size
	physical     map[backend.Handle]*physical
	mappings     map[uint64]*mapping // base -> mapping
	pools        map[backend.Handle]*pool
	defaultPool  backend.Handle
	currentPool  backend.Handle
	asyncAllocs  map[uint64]asyncAlloc // pointer -> its pool and size
	arrays       map[backend.Handle]*array
	textures     map[uint64]texture
	nextObject   uint64
	graphs       map[backend.Handle]*graph
	execs        map[backend.Handle]*graph
	captures     map[backend.Handle]*capture // stream -> its capture
	nextCapture  uint64
	links        map[backend.Handle]*link
	conds        map[uint64]*condHandle // conditional handle value -> handle
	graphAllocs  map[uint64]*graphAlloc // allocation nodes' addresses
	graphMem     graphMem
	ipc          ipcObjects // shared with other processes (ipc.go)
}

var (
	_ backend.VirtualMemory = (*Context)(nil)
	_ backend.MemPools      = (*Context)(nil)
	_ backend.Arrays        = (*Context)(nil)
	_ backend.Textures      = (*Context)(nil)
	_ backend.Graphs        = (*Context)(nil)
	_ backend.Launches      = (*Context)(nil)
)

// closeFamilies gives back the device memory the families hold (Close).
func (c *Context) closeFamilies() {
	c.mu.Lock()
	defer c.mu.Unlock()
	var held uint64
	for _, p := range c.fam.physical {
		if !p.imported {
			held += uint64(len(p.data))
		}
	}
	for _, p := range c.fam.pools {
		held += p.reserved
	}
	held += c.fam.graphMem.reserved
	c.fam = families{}
	c.b.release(c.ordinal, held)
}

// sortedKeys returns m's keys in order (deterministic listings).
func sortedKeys[V any](m map[backend.Handle]V) []backend.Handle {
	ks := make([]backend.Handle, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i] < ks[j] })
	return ks
}
