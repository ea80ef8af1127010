package worker

import (
	"testing"

	"gpucloud/gpuserverd/backend"
)

// A workspace may span virtual-memory mappings that follow one another (PyTorch's expandable
// segments); a gap or a range past the last mapping is still refused.
func TestWorkspaceWithinAdjacentMappings(t *testing.T) {
	d := &device{allocs: map[uint64]uint64{0x1000: 0x100}}
	d.fam.mappings = map[uint64]vmMapping{
		0x10000: {handle: backend.Handle(1), size: 0x2000},
		0x12000: {handle: backend.Handle(2), size: 0x2000},
		0x20000: {handle: backend.Handle(3), size: 0x1000},
	}
	for _, c := range []struct {
		p, n uint64
		want bool
	}{
		{0x1000, 0x100, true},           // one allocation
		{0x1080, 0x100, false},          // past its end
		{0x10800, 0x1000, true},         // inside one mapping
		{0x11000, 0x2000, true},         // across two adjacent mappings
		{0x10000, 0x4000, true},         // both, exactly
		{0x10000, 0x4001, false},        // one byte past
		{0x13000, 0xd000 + 0x10, false}, // across the gap to the third
		{^uint64(0) - 4, 16, false},     // wraps around
	} {
		if got := d.within(c.p, c.n); got != c.want {
			t.Errorf("within(%#x, %#x) = %v, want %v", c.p, c.n, got, c.want)
		}
	}
}
