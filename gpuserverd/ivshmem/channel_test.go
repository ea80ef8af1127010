package ivshmem

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func newFile(t *testing.T, size int64, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), FilePrefix+"i1")
	if err := os.WriteFile(p, nil, mode); err != nil {
		t.Fatal(err)
	}
	os.Chmod(p, mode)
	if err := os.Truncate(p, size); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestOpenChecksTheFile(t *testing.T) {
	for _, tc := range []struct {
		size int64
		mode os.FileMode
		want string
	}{
		{16 << 20, 0o666, "lets other users in"},
		{8 << 20, 0o600, "outside"},
		{24 << 20, 0o660, "not a power of two"},
	} {
		if _, err := Open(newFile(t, tc.size, tc.mode)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("size %d mode %v: %v, want %q", tc.size, tc.mode, err, tc.want)
		}
	}
	dir := t.TempDir()
	if _, err := Open(dir); err == nil {
		t.Error("a directory opened as a channel")
	}
	target := newFile(t, 16<<20, 0o600)
	link := filepath.Join(dir, FilePrefix+"link")
	os.Symlink(target, link)
	if _, err := Open(link); err == nil {
		t.Error("a symlink was followed")
	}
}

func TestResetWritesAValidHeader(t *testing.T) {
	c, err := Open(newFile(t, 16<<20, 0o600))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := ParseHeader(c.Mem); err == nil {
		t.Fatal("a fresh file parsed as a channel")
	}
	binary.LittleEndian.PutUint32(c.Mem[0:], 77) // ring 0's head, left by a session
	c.Reset()
	h, err := ParseHeader(c.Mem)
	if err != nil || h.State != StateFree || h.Generation != 1 || h.Size != 16<<20 {
		t.Fatalf("after reset: %+v %v", h, err)
	}
	if binary.LittleEndian.Uint32(c.Mem[0:]) != 0 {
		t.Fatal("reset left the rings' words")
	}
	c.Reset()
	if c.Generation() != 2 {
		t.Fatalf("generation %d after two resets", c.Generation())
	}
}

func TestInstanceOf(t *testing.T) {
	for name, want := range map[string]string{"gpucloud-abc": "abc", "gpucloud-": "", "other": "", "gpucloud-a.b": ""} {
		if got, ok := InstanceOf(name); got != want && ok || ok != (want != "") {
			t.Errorf("%q: %q %v", name, got, ok)
		}
	}
}

// FuzzParseHeader: any region either parses to a header that agrees with it or is refused.
func FuzzParseHeader(f *testing.F) {
	good := make([]byte, HeaderOff+256)
	binary.LittleEndian.PutUint64(good[HeaderOff:], Magic)
	binary.LittleEndian.PutUint32(good[HeaderOff+8:], Version)
	binary.LittleEndian.PutUint64(good[HeaderOff+16:], uint64(len(good)))
	binary.LittleEndian.PutUint32(good[HeaderOff+28:], 4) // slot 2 of 4
	binary.LittleEndian.PutUint32(good[HeaderOff+32:], 2)
	f.Add(good[HeaderOff:])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, hdr []byte) {
		mem := make([]byte, HeaderOff+len(hdr))
		copy(mem[HeaderOff:], hdr)
		h, err := ParseHeader(mem)
		if err == nil && (h.Magic != Magic || h.Version != Version || h.Size != uint64(len(mem)) || h.State > StateResetting ||
			h.Slots == 0 || h.Slots > MaxSlots || h.Index >= h.Slots) {
			t.Fatalf("accepted %+v for %d bytes", h, len(mem))
		}
	})
}

func TestSlotCount(t *testing.T) {
	for _, tc := range []struct {
		size      int64
		want, got int
	}{
		{16 << 20, 0, 1}, {64 << 20, 0, 1}, {128 << 20, 0, 2}, {256 << 20, 0, 4}, {1 << 30, 0, 4},
		{64 << 20, 4, 4}, {64 << 20, 8, 4}, // no slot under 16 MiB
		{256 << 20, 3, 2}, {256 << 20, 1, 1}, {16 << 30, 1000, MaxSlots},
	} {
		if n := SlotCount(tc.size, tc.want); n != tc.got {
			t.Errorf("SlotCount(%d MiB, %d) = %d, want %d", tc.size>>20, tc.want, n, tc.got)
		}
	}
}

// Each slot gets a header of its own that names it; a worker maps its slot alone.
func TestSlots(t *testing.T) {
	path := newFile(t, 64<<20, 0o600)
	c, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	slots := c.Slots(4)
	for _, s := range slots {
		s.Reset()
	}
	for i, s := range slots {
		h, err := ParseHeader(s.Mem)
		if err != nil || h.Index != uint32(i) || h.Slots != 4 || h.Size != 16<<20 || h.State != StateFree {
			t.Fatalf("slot %d: %+v %v", i, h, err)
		}
	}
	if _, err := ParseHeader(c.Mem); err == nil {
		t.Fatal("the whole region parsed as one slot")
	}
	f, _ := os.OpenFile(path, os.O_RDWR, 0)
	w, err := AdoptSlot(f, 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if h, err := ParseHeader(w.Mem); err != nil || h.Index != 2 || len(w.Mem) != 16<<20 {
		t.Fatalf("adopted slot: %+v %v (%d bytes)", h, err, len(w.Mem))
	}
	w.Mem[100] = 7 // the same bytes as the server's view of slot 2
	if slots[2].Mem[100] != 7 || slots[1].Mem[100] != 0 {
		t.Fatal("the adopted slot is not slot 2 of the file")
	}
	for _, bad := range [][2]int{{4, 4}, {-1, 4}, {0, 8}, {0, 3}, {0, 0}} {
		if _, err := AdoptSlot(f, bad[0], bad[1]); err == nil || !strings.Contains(err.Error(), "has no slot") {
			t.Errorf("slot %d of %d: %v", bad[0], bad[1], err)
		}
	}
	// A new layout retires the old one's slots: their guests see a new generation.
	gen := slots[3].Generation()
	c.Retire()
	if slots[3].State() != StateResetting || slots[3].Generation() == gen {
		t.Fatalf("after Retire: state %d generation %d", slots[3].State(), slots[3].Generation())
	}
}
