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
	f.Add(good[HeaderOff:])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, hdr []byte) {
		mem := make([]byte, HeaderOff+len(hdr))
		copy(mem[HeaderOff:], hdr)
		h, err := ParseHeader(mem)
		if err == nil && (h.Magic != Magic || h.Version != Version || h.Size != uint64(len(mem)) || h.State > StateResetting) {
			t.Fatalf("accepted %+v for %d bytes", h, len(mem))
		}
	})
}
