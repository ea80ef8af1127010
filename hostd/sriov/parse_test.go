package sriov

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEnableVFsWritesTotal(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "class", "infiniband", "mlx5_1", "device")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "sriov_numvfs"), []byte("0\n"), 0o644)
	if err := enableVFs(root, Device{Name: "mlx5_1", TotalVFs: 16}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "sriov_numvfs")); string(b) != "16" {
		t.Fatalf("sriov_numvfs = %q", b)
	}
}

func TestParsePCIAddress(t *testing.T) {
	good := map[string]string{"0000:3b:00.1": "0000:3b:00.1", "0000:AF:1f.7": "0000:af:1f.7"}
	for in, want := range good {
		if got, err := parsePCIAddress(in); err != nil || got != want {
			t.Errorf("%q: %q %v", in, got, err)
		}
	}
	for _, in := range []string{"", "0000:3b:00", "0000:3b:20.0", "0000:3b:00.8", "000g:3b:00.1", "0000-3b:00.1", "0000:3b:00.1 "} {
		if _, err := parsePCIAddress(in); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}

func FuzzParseCount(f *testing.F) {
	for _, s := range []string{"8\n", "0", "", "-1", "99999", " 4 ", "0x10", "+3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parseCount("sriov_numvfs", s)
		if err != nil {
			if !strings.Contains(err.Error(), "sriov_numvfs") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if n < 0 || n > maxVFs {
			t.Fatalf("accepted out-of-range %d from %q", n, s)
		}
	})
}

func FuzzParsePCIAddress(f *testing.F) {
	for _, s := range []string{"0000:3b:00.1", "ffff:ff:1f.7", "0000:3b:00", "garbage", "0000:3b:00.1\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := parsePCIAddress(s)
		if err != nil {
			return
		}
		d, b, sl, fn, err := PCIParts(a)
		if err != nil {
			t.Fatalf("accepted %q but PCIParts fails: %v", s, err)
		}
		if back := fmt.Sprintf("%04x:%02x:%02x.%x", d, b, sl, fn); back != a {
			t.Fatalf("%q -> %q -> %q", s, a, back)
		}
	})
}

func FuzzParseVirtfnIndex(f *testing.F) {
	for _, s := range []string{"virtfn0", "virtfn12", "virtfn", "virtfn-1", "virtfn01", "virt"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parseVirtfnIndex(s)
		if err == nil && fmt.Sprintf("virtfn%d", n) != s {
			t.Fatalf("%q parsed as %d", s, n)
		}
	})
}
