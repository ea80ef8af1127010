package cuda

import (
	"fmt"
	"maps"
	"slices"
	"sort"

	"gpucloud/gpuserverd/backend"
)

// vaSpace places a session's allocations in one virtual address range the context reserved
// (issue 18): a restore in a fresh process reserves the same range and maps memory at the same
// addresses, so every pointer the guest holds stays valid. It is the bookkeeping only; a mapper
// backs and drops the physical memory (the driver's virtual memory management API, or a test
// double).
//
// Allocations over smallMax get a mapping of their own, rounded to the granularity (2 MiB on an
// H100). Smaller ones are sub-allocated from slabs of one granule, so a program that makes many
// small allocations does not spend 2 MiB on each; a slab is dropped once empty, unless it is
// the only one.
type vaSpace struct {
	base, size, gran uint64
	free             []span            // unused address space, sorted, merged
	own              map[uint64]uint64 // allocation with a mapping of its own -> bytes mapped
	slabs            map[uint64]*slab  // slab base -> slab
	sizes            map[uint64]uint64 // every allocation -> bytes asked for
}

type span struct{ addr, size uint64 }

type slab struct {
	free []span
	used uint64
}

// mapper backs [addr, addr+n) with device memory, and drops it.
type mapper interface {
	back(addr, n uint64) error
	drop(addr, n uint64) error
}

const (
	// smallMax is the largest allocation sub-allocated from a slab.
	smallMax = 1 << 20
	// smallAlign aligns sub-allocations as cuMemAlloc aligns its own (at least 256 bytes).
	smallAlign = 512
)

func newVASpace(base, size, gran uint64) *vaSpace {
	return &vaSpace{base: base, size: size, gran: gran, free: []span{{base, size}},
		own: map[uint64]uint64{}, slabs: map[uint64]*slab{}, sizes: map[uint64]uint64{}}
}

func roundUp(n, to uint64) uint64 { return (n + to - 1) / to * to }

// take removes the first aligned span of n bytes from list.
func take(list []span, n, align uint64) ([]span, uint64, bool) {
	for i, s := range list {
		a := roundUp(s.addr, align)
		if a-s.addr > s.size || s.size-(a-s.addr) < n {
			continue
		}
		return carve(list, i, a, n), a, true
	}
	return list, 0, false
}

// claim removes exactly [addr, addr+n) from list, which must hold it whole.
func claim(list []span, addr, n uint64) ([]span, bool) {
	i := sort.Search(len(list), func(i int) bool { return list[i].addr+list[i].size > addr })
	if i == len(list) || list[i].addr > addr || list[i].addr+list[i].size-addr < n {
		return list, false
	}
	return carve(list, i, addr, n), true
}

// carve cuts [a, a+n) out of list[i], which holds it, in a copy of list (the caller keeps the
// old one until the memory is backed).
func carve(list []span, i int, a, n uint64) []span {
	list = slices.Clone(list)
	s := list[i]
	var repl []span
	if a > s.addr {
		repl = append(repl, span{s.addr, a - s.addr})
	}
	if end := a + n; end < s.addr+s.size {
		repl = append(repl, span{end, s.addr + s.size - end})
	}
	return slices.Replace(list, i, i+1, repl...)
}

// give returns [addr, addr+n) to list, merging it with its neighbours.
func give(list []span, addr, n uint64) []span {
	i := sort.Search(len(list), func(i int) bool { return list[i].addr > addr })
	list = slices.Insert(list, i, span{addr, n})
	if i+1 < len(list) && list[i].addr+list[i].size == list[i+1].addr {
		list[i].size += list[i+1].size
		list = slices.Delete(list, i+1, i+2)
	}
	if i > 0 && list[i-1].addr+list[i-1].size == list[i].addr {
		list[i-1].size += list[i].size
		list = slices.Delete(list, i, i+1)
	}
	return list
}

var errNoAddressSpace = fmt.Errorf("cuda: the session's reserved address range is full: %w", backend.ErrOutOfMemory)

// alloc places an allocation of bytes, backing new address space through m.
func (v *vaSpace) alloc(m mapper, bytes uint64) (uint64, error) {
	if bytes == 0 {
		return 0, fmt.Errorf("cuda: allocation of 0 bytes: %w", backend.ErrInvalidValue)
	}
	if bytes > v.size {
		return 0, fmt.Errorf("cuda: allocation of %d bytes: %w", bytes, backend.ErrOutOfMemory)
	}
	if bytes <= smallMax {
		return v.allocSmall(m, bytes)
	}
	n := roundUp(bytes, v.gran)
	free, a, ok := take(v.free, n, v.gran)
	if !ok {
		return 0, errNoAddressSpace
	}
	if err := m.back(a, n); err != nil {
		return 0, err
	}
	v.free = free
	v.own[a], v.sizes[a] = n, bytes
	return a, nil
}

func (v *vaSpace) allocSmall(m mapper, bytes uint64) (uint64, error) {
	n := roundUp(bytes, smallAlign)
	for _, base := range slices.Sorted(maps.Keys(v.slabs)) {
		s := v.slabs[base]
		if free, a, ok := take(s.free, n, smallAlign); ok {
			s.free, s.used = free, s.used+n
			v.sizes[a] = bytes
			return a, nil
		}
	}
	s, base, err := v.newSlab(m, 0)
	if err != nil {
		return 0, err
	}
	s.free, _, _ = take(s.free, n, smallAlign)
	s.used = n
	v.sizes[base] = bytes
	return base, nil
}

// newSlab backs one granule for sub-allocation: the first free one, or at (restores).
func (v *vaSpace) newSlab(m mapper, at uint64) (*slab, uint64, error) {
	free, a, ok := v.free, at, false
	if at == 0 {
		free, a, ok = take(v.free, v.gran, v.gran)
	} else {
		free, ok = claim(v.free, at, v.gran)
	}
	if !ok {
		return nil, 0, errNoAddressSpace
	}
	if err := m.back(a, v.gran); err != nil {
		return nil, 0, err
	}
	v.free = free
	s := &slab{free: []span{{a, v.gran}}}
	v.slabs[a] = s
	return s, a, nil
}

// release frees the allocation at p, dropping its mapping (or its slab's, once empty).
func (v *vaSpace) release(m mapper, p uint64) error {
	bytes, ok := v.sizes[p]
	if !ok {
		return fmt.Errorf("cuda: free of %#x, which is not an allocation: %w", p, backend.ErrInvalidValue)
	}
	if n, ok := v.own[p]; ok {
		if err := m.drop(p, n); err != nil {
			return err
		}
		delete(v.own, p)
		delete(v.sizes, p)
		v.free = give(v.free, p, n)
		return nil
	}
	base := p &^ (v.gran - 1)
	s := v.slabs[base]
	n := roundUp(bytes, smallAlign)
	s.free, s.used = give(s.free, p, n), s.used-n
	delete(v.sizes, p)
	if s.used == 0 && len(v.slabs) > 1 {
		if err := m.drop(base, v.gran); err != nil {
			return err
		}
		delete(v.slabs, base)
		v.free = give(v.free, base, v.gran)
	}
	return nil
}

// regions lists every allocation for an image: address, bytes asked for, and the bytes mapped
// for those with a mapping of their own.
func (v *vaSpace) regions() []backend.Region {
	out := make([]backend.Region, 0, len(v.sizes))
	for _, p := range slices.Sorted(maps.Keys(v.sizes)) {
		out = append(out, backend.Region{Addr: p, Bytes: v.sizes[p], Mapped: v.own[p]})
	}
	return out
}

// place puts an image's allocation back at its address (a restore), backing what it needs.
func (v *vaSpace) place(m mapper, r backend.Region) error {
	bad := func(why string) error {
		return fmt.Errorf("restore: allocation %#x of %d bytes (%d mapped) %s: %w", r.Addr, r.Bytes, r.Mapped, why, backend.ErrInvalidValue)
	}
	switch {
	case r.Bytes == 0 || r.Addr < v.base || r.Addr-v.base >= v.size:
		return bad("lies outside the reserved range")
	case r.Mapped > 0:
		if r.Addr%v.gran != 0 || r.Mapped%v.gran != 0 || r.Bytes > r.Mapped || r.Bytes <= smallMax {
			return bad("is not a whole mapping")
		}
		free, ok := claim(v.free, r.Addr, r.Mapped)
		if !ok {
			return bad("overlaps another or the range's end")
		}
		if err := m.back(r.Addr, r.Mapped); err != nil {
			return err
		}
		v.free = free
		v.own[r.Addr], v.sizes[r.Addr] = r.Mapped, r.Bytes
		return nil
	}
	if r.Bytes > smallMax || r.Addr%smallAlign != 0 {
		return bad("is not a sub-allocation")
	}
	base := r.Addr &^ (v.gran - 1)
	s := v.slabs[base]
	if _, free := claim(v.free, base, v.gran); s == nil && !free {
		return bad("lies in another allocation's mapping")
	}
	if s == nil {
		var err error
		if s, _, err = v.newSlab(m, base); err != nil {
			return fmt.Errorf("restore: the slab of allocation %#x: %w", r.Addr, err)
		}
	}
	n := roundUp(r.Bytes, smallAlign)
	free, ok := claim(s.free, r.Addr, n)
	if !ok {
		return bad("overlaps another or its slab's end")
	}
	s.free, s.used = free, s.used+n
	v.sizes[r.Addr] = r.Bytes
	return nil
}

// mappings lists every mapping, for dropping them all (a context's close).
func (v *vaSpace) mappings() []span {
	var out []span
	for a, n := range v.own {
		out = append(out, span{a, n})
	}
	for a := range v.slabs {
		out = append(out, span{a, v.gran})
	}
	return out
}
