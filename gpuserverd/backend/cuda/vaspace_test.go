package cuda

import (
	"errors"
	"math/rand/v2"
	"testing"

	"gpucloud/gpuserverd/backend"
)

// fakeMapper records what is backed, refusing overlaps, as the driver's cuMemMap would (a test
// double for the virtual memory management API).
type fakeMapper struct {
	t      *testing.T
	mapped map[uint64]uint64
	failAt int // the back call that fails (1-based; 0: none)
	calls  int
}

func (f *fakeMapper) back(addr, n uint64) error {
	f.calls++
	if f.calls == f.failAt {
		return &Error{Op: "cuMemCreate", Code: backend.ErrOutOfMemory}
	}
	for a, m := range f.mapped {
		if addr < a+m && a < addr+n {
			f.t.Fatalf("mapping %#x+%d overlaps %#x+%d", addr, n, a, m)
		}
	}
	f.mapped[addr] = n
	return nil
}

func (f *fakeMapper) drop(addr, n uint64) error {
	if f.mapped[addr] != n {
		f.t.Fatalf("unmapping %#x+%d, which is not a mapping (%d)", addr, n, f.mapped[addr])
	}
	delete(f.mapped, addr)
	return nil
}

const testGran = 2 << 20

func newTestSpace(t *testing.T) (*vaSpace, *fakeMapper) {
	return newVASpace(0x6000_0000_0000, 64*testGran, testGran), &fakeMapper{t: t, mapped: map[uint64]uint64{}}
}

// Every live allocation lies in a mapping and overlaps no other; small ones share slabs.
func TestVASpacePlacesWithoutOverlap(t *testing.T) {
	v, m := newTestSpace(t)
	rng := rand.New(rand.NewPCG(1, 2))
	live := map[uint64]uint64{}
	for i := 0; i < 2000; i++ {
		if len(live) > 0 && rng.IntN(3) == 0 {
			for p := range live {
				if err := v.release(m, p); err != nil {
					t.Fatal(err)
				}
				delete(live, p)
				break
			}
			continue
		}
		n := uint64(1 + rng.IntN(4<<10))
		if rng.IntN(8) == 0 {
			n = uint64(smallMax + 1 + rng.IntN(3*testGran))
		}
		p, err := v.alloc(m, n)
		if errors.Is(err, backend.ErrOutOfMemory) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if p%smallAlign != 0 {
			t.Fatalf("allocation %#x is not %d-aligned", p, smallAlign)
		}
		for q, k := range live {
			if p < q+k && q < p+n {
				t.Fatalf("allocation %#x+%d overlaps %#x+%d", p, n, q, k)
			}
		}
		if !inMapping(m, p, n) {
			t.Fatalf("allocation %#x+%d is not backed", p, n)
		}
		live[p] = n
	}
	if len(v.slabs) == 0 || len(v.own) == 0 {
		t.Fatalf("expected both slabs and own mappings, got %d and %d", len(v.slabs), len(v.own))
	}
	for p := range live {
		if err := v.release(m, p); err != nil {
			t.Fatal(err)
		}
	}
	if len(m.mapped) > 1 || len(v.free) > 2 {
		t.Fatalf("after freeing everything: %d mappings, %d free spans", len(m.mapped), len(v.free))
	}
}

func inMapping(m *fakeMapper, p, n uint64) bool {
	for a, k := range m.mapped {
		if p >= a && p+n <= a+k {
			return true
		}
	}
	return false
}

// A restore places every allocation at its address in a fresh space, and the restored space
// allocates and frees on as the old one would.
func TestVASpaceRestoresAtTheSameAddresses(t *testing.T) {
	v, m := newTestSpace(t)
	var ps []uint64
	for _, n := range []uint64{100, 3 * testGran, 700, smallMax, 5000, smallMax + 1} {
		p, err := v.alloc(m, n)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	if err := v.release(m, ps[1]); err != nil { // a hole the restore must keep free
		t.Fatal(err)
	}
	regions := v.regions()

	w, m2 := newTestSpace(t)
	for _, r := range regions {
		if err := w.place(m2, r); err != nil {
			t.Fatal(err)
		}
	}
	for a, n := range m.mapped {
		if m2.mapped[a] != n {
			t.Fatalf("mapping %#x+%d not made again (%v)", a, n, m2.mapped)
		}
	}
	if len(m2.mapped) != len(m.mapped) {
		t.Fatalf("restored %d mappings, the source had %d", len(m2.mapped), len(m.mapped))
	}
	// The same next allocations land where they would have in the source.
	for _, n := range []uint64{300, 2 * testGran} {
		a, err := v.alloc(m, n)
		if err != nil {
			t.Fatal(err)
		}
		b, err := w.alloc(m2, n)
		if err != nil {
			t.Fatal(err)
		}
		if a != b {
			t.Fatalf("after the restore %d bytes land at %#x, in the source at %#x", n, b, a)
		}
	}
	for _, p := range []uint64{ps[0], ps[5]} {
		if err := w.release(m2, p); err != nil {
			t.Fatal(err)
		}
	}
}

// A restore refuses an image whose allocations overlap, leave the range or are not whole
// mappings, naming the allocation; a free of something never allocated is refused.
func TestVASpaceRefusesBadRegions(t *testing.T) {
	base := uint64(0x6000_0000_0000)
	for _, c := range []struct {
		name    string
		regions []backend.Region
	}{
		{"outside", []backend.Region{{Addr: base - testGran, Bytes: 4 << 20, Mapped: 4 << 20}}},
		{"past the end", []backend.Region{{Addr: base + 63*testGran, Bytes: 4 << 20, Mapped: 4 << 20}}},
		{"overlap", []backend.Region{{Addr: base, Bytes: 4 << 20, Mapped: 4 << 20}, {Addr: base + testGran, Bytes: 4 << 20, Mapped: 4 << 20}}},
		{"small in a mapping", []backend.Region{{Addr: base, Bytes: 4 << 20, Mapped: 4 << 20}, {Addr: base + 512, Bytes: 100}}},
		{"unaligned mapping", []backend.Region{{Addr: base + 4096, Bytes: 4 << 20, Mapped: 4 << 20}}},
		{"small overlap", []backend.Region{{Addr: base, Bytes: 1000}, {Addr: base + 512, Bytes: 100}}},
		{"empty", []backend.Region{{Addr: base, Bytes: 0}}},
	} {
		v, m := newTestSpace(t)
		var err error
		for _, r := range c.regions {
			if err = v.place(m, r); err != nil {
				break
			}
		}
		if !errors.Is(err, backend.ErrInvalidValue) {
			t.Errorf("%s: got %v, want an invalid-value error", c.name, err)
		}
	}
	v, m := newTestSpace(t)
	if err := v.release(m, base); !errors.Is(err, backend.ErrInvalidValue) {
		t.Errorf("free of a stranger: %v", err)
	}
}

// A failed mapping leaves the space as it was: the next allocation takes the same address.
func TestVASpaceFailedBackingChangesNothing(t *testing.T) {
	v, m := newTestSpace(t)
	m.failAt = 1
	if _, err := v.alloc(m, 3*testGran); !errors.Is(err, backend.ErrOutOfMemory) {
		t.Fatalf("got %v, want the driver's out-of-memory", err)
	}
	if _, err := v.alloc(m, 10); !errors.Is(err, backend.ErrOutOfMemory) && m.calls != 2 {
		t.Fatalf("small allocation after a failure: %v", err)
	}
	p, err := v.alloc(m, 3*testGran)
	if err != nil || p != v.base+testGran {
		t.Fatalf("after a failure: %#x %v, want %#x", p, err, v.base+testGran)
	}
	if _, err := v.alloc(m, 65*testGran); !errors.Is(err, backend.ErrOutOfMemory) {
		t.Fatalf("past the range: %v", err)
	}
}
