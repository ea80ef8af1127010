package vmtest

import (
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// readNewc lists name -> contents of a gzip'd newc archive, checking magic and alignment.
func readNewc(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for off := 0; ; {
		if string(b[off:off+6]) != "070701" {
			t.Fatalf("bad magic at %d", off)
		}
		field := func(i int) int {
			v, err := strconv.ParseUint(string(b[off+6+8*i:off+14+8*i]), 16, 32)
			if err != nil {
				t.Fatal(err)
			}
			return int(v)
		}
		size, nameLen := field(6), field(11)
		name := string(b[off+110 : off+110+nameLen-1])
		off = (off + 110 + nameLen + 3) &^ 3
		if name == "TRAILER!!!" {
			return out
		}
		out[name] = string(b[off : off+size])
		off = (off + size + 3) &^ 3
	}
}

func TestInitramfsArchive(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	os.WriteFile(src, []byte("abcde"), 0o644)
	dst := filepath.Join(dir, "initrd.gz")
	err := writeInitramfs(dst, []cpioFile{
		{name: "init", data: []byte("#!/bin/sh\n"), mode: 0o755},
		{name: "lib/modules/x.ko", src: src, mode: 0o644},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := readNewc(t, dst)
	if got["init"] != "#!/bin/sh\n" || got["lib/modules/x.ko"] != "abcde" {
		t.Fatalf("archive %q", got)
	}
	if _, ok := got["lib/modules"]; !ok {
		t.Fatal("parent directories missing")
	}
}

// TestResolveModulesOrdersDependencies builds tiny ELF objects with a .modinfo section, as
// kernel modules have, and checks dependencies come first.
func TestResolveModulesOrdersDependencies(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not installed")
	}
	tree := t.TempDir()
	os.MkdirAll(filepath.Join(tree, "kernel"), 0o755)
	mods := map[string]string{"alpha": "beta,gamma_x", "beta": "gamma_x", "gamma-x": ""}
	for name, deps := range mods {
		c := filepath.Join(tree, name+".c")
		os.WriteFile(c, []byte(`__attribute__((section(".modinfo"), used)) static const char info[] = "license=GPL\0depends=`+deps+`";`), 0o644)
		if out, err := exec.Command("gcc", "-c", "-o", filepath.Join(tree, "kernel", name+".ko"), c).CombinedOutput(); err != nil {
			t.Fatalf("%v %s", err, out)
		}
	}
	order, err := resolveModules(tree, []string{"alpha"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range order {
		names = append(names, strings.TrimSuffix(filepath.Base(p), ".ko"))
	}
	if strings.Join(names, " ") != "gamma-x beta alpha" {
		t.Fatalf("order %v", names)
	}
	if _, err := resolveModules(tree, []string{"missing"}); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("missing module: %v", err)
	}
}

// An overlay is a second archive after the guest's: both parts read back, in order.
func TestWithOverlay(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "base.gz")
	if err := writeInitramfs(base, []cpioFile{{name: "init", data: []byte("old"), mode: 0o755}}); err != nil {
		t.Fatal(err)
	}
	g, err := Guest{Kernel: "k", Initrd: base}.WithOverlay(filepath.Join(dir, "both.gz"), File{Name: "init", Data: []byte("new"), Mode: 0o755})
	if err != nil {
		t.Fatal(err)
	}
	first := readNewc(t, base)
	b, _ := os.ReadFile(g.Initrd)
	baseLen, _ := os.Stat(base)
	rest := filepath.Join(dir, "rest.gz")
	os.WriteFile(rest, b[baseLen.Size():], 0o644)
	if first["init"] != "old" || readNewc(t, rest)["init"] != "new" || g.Kernel != "k" {
		t.Fatalf("parts %q %q", first, readNewc(t, rest))
	}
}

// The mini image's cache key changes with any input's bytes or name, and only then.
func TestHashFilesKeysTheMiniImageCache(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	os.WriteFile(a, []byte("one"), 0o644)
	os.WriteFile(b, []byte("two"), 0o644)
	h1, err := hashFiles([]string{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if h2, _ := hashFiles([]string{a, b}); h2 != h1 {
		t.Fatal("same inputs, different keys")
	}
	os.WriteFile(b, []byte("twO"), 0o644)
	if h3, _ := hashFiles([]string{a, b}); h3 == h1 {
		t.Fatal("a changed library kept the key")
	}
	os.WriteFile(b, []byte("two"), 0o644)
	c := filepath.Join(dir, "c")
	os.Rename(b, c)
	if h4, _ := hashFiles([]string{a, c}); h4 == h1 {
		t.Fatal("a renamed input kept the key")
	}
	if _, err := hashFiles([]string{filepath.Join(dir, "missing")}); err == nil {
		t.Fatal("a missing input hashed")
	}
}

// The build lock serializes test processes sharing the cache: a second locker waits until the
// first unlocks, and gives up when its context ends.
func TestBuildLockSerializes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache", "build.lock")
	unlock, err := lockFile(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := lockFile(ctx, path); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a second lock while held: %v, want it to wait and give up", err)
	}
	got := make(chan error, 1)
	go func() {
		u, err := lockFile(context.Background(), path)
		if err == nil {
			u()
		}
		got <- err
	}()
	time.Sleep(150 * time.Millisecond)
	select {
	case err := <-got:
		t.Fatalf("took the lock while it was held: %v", err)
	default:
	}
	unlock()
	if err := <-got; err != nil {
		t.Fatalf("after unlock: %v", err)
	}
}
