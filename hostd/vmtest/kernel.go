// Package vmtest makes what a real-VM test needs on a plain Debian machine: a running libvirtd,
// and a small bootable guest (Debian's kernel plus a busybox initramfs made here) whose init
// reads hostd's seed from the cdrom, reaches the gpuserverd endpoint written there over
// user-mode networking, and says so on its serial console. Packages come from Debian's archive
// through apt-get download, into a cache dir, never from elsewhere.
package vmtest

import (
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Packages are the Debian packages the guest is made of.
var Packages = []string{"linux-image-amd64", "busybox-static"}

// guestModules are the kernel modules the guest's init loads, dependencies resolved from each
// module's own modinfo: the q35 SATA cdrom with the seed, ISO 9660, the virtio NIC, and virtio
// disks (volumes).
var guestModules = []string{"ahci", "sr_mod", "isofs", "virtio_pci", "virtio_net", "virtio_blk"}

// Guest is a bootable kernel and initramfs.
type Guest struct {
	Kernel, Initrd string
}

// BuildGuest fetches the packages into cacheDir (once) and writes the kernel and initramfs there.
func BuildGuest(ctx context.Context, cacheDir string) (Guest, error) {
	g := Guest{Kernel: filepath.Join(cacheDir, "vmlinuz"), Initrd: filepath.Join(cacheDir, "initrd.gz")}
	// The stamp names the modules the cached initramfs loads: a changed list rebuilds it.
	stamp, want := filepath.Join(cacheDir, "guest-modules"), strings.Join(guestModules, " ")
	built := func() bool {
		had, err := os.ReadFile(stamp)
		return err == nil && string(had) == want && fileExists(g.Kernel) && fileExists(g.Initrd)
	}
	if built() {
		return g, nil
	}
	// Test packages run at once (go test runs each package's binary in parallel) and share the
	// cache: one builds while the others wait, then finds it built (a fresh clone's CI had two
	// unpack into the same tree at once and remove it under each other).
	unlock, err := lockFile(ctx, filepath.Join(cacheDir, "build.lock"))
	if err != nil {
		return g, err
	}
	defer unlock()
	if built() {
		return g, nil
	}
	root := filepath.Join(cacheDir, "root")
	if err := fetch(ctx, cacheDir, root); err != nil {
		return g, err
	}
	kernels, _ := filepath.Glob(filepath.Join(root, "boot", "vmlinuz-*"))
	mods, _ := filepath.Glob(filepath.Join(root, "lib", "modules", "*"))
	if len(kernels) != 1 || len(mods) != 1 {
		return g, fmt.Errorf("vmtest: want one kernel and one module tree in %s, found %v %v", root, kernels, mods)
	}
	order, err := resolveModules(mods[0], guestModules)
	if err != nil {
		return g, err
	}
	files := []cpioFile{
		{name: "bin/busybox", src: filepath.Join(root, "bin", "busybox"), mode: 0o755},
		{name: "init", data: []byte(initScript), mode: 0o755},
	}
	var list []string
	for _, m := range order {
		name := "lib/modules/" + filepath.Base(m)
		files = append(files, cpioFile{name: name, src: m, mode: 0o644})
		list = append(list, "/"+name)
	}
	files = append(files, cpioFile{name: "modules", data: []byte(strings.Join(list, "\n") + "\n"), mode: 0o644})
	if err := writeInitramfs(g.Initrd, files); err != nil {
		return g, err
	}
	if err := copyFile(kernels[0], g.Kernel); err != nil {
		return g, err
	}
	if err := os.WriteFile(stamp, []byte(want), 0o644); err != nil {
		return g, fmt.Errorf("vmtest: %w", err)
	}
	// The unpacked tree (~400 MB of modules) is rebuilt from the cached .debs when needed.
	if err := os.RemoveAll(root); err != nil {
		return g, fmt.Errorf("vmtest: %w", err)
	}
	return g, nil
}

// fetch downloads the packages with apt-get and unpacks them with dpkg-deb into root.
func fetch(ctx context.Context, cacheDir, root string) error {
	debs := filepath.Join(cacheDir, "debs")
	if err := os.MkdirAll(debs, 0o755); err != nil {
		return fmt.Errorf("vmtest: %w", err)
	}
	pkgs := append([]string(nil), Packages...)
	// linux-image-amd64 is a metapackage: the kernel is the package it depends on.
	if img, err := kernelPackage(ctx); err == nil {
		pkgs = append(pkgs, img)
	} else {
		return err
	}
	for _, p := range pkgs {
		if m, _ := filepath.Glob(filepath.Join(debs, p+"_*.deb")); len(m) > 0 {
			continue
		}
		cmd := exec.CommandContext(ctx, "apt-get", "download", p)
		cmd.Dir = debs
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("vmtest: apt-get download %s: %w: %s", p, err, out)
		}
	}
	all, _ := filepath.Glob(filepath.Join(debs, "*.deb"))
	for _, d := range all {
		if out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", d, root).CombinedOutput(); err != nil {
			return fmt.Errorf("vmtest: dpkg-deb -x %s: %w: %s", d, err, out)
		}
	}
	return nil
}

func kernelPackage(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "apt-cache", "depends", "--important", "linux-image-amd64").Output()
	if err != nil {
		return "", fmt.Errorf("vmtest: apt-cache depends linux-image-amd64: %w", err)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if dep, ok := strings.CutPrefix(strings.TrimSpace(l), "Depends: "); ok && strings.HasPrefix(dep, "linux-image-") {
			return strings.TrimSpace(dep), nil
		}
	}
	return "", fmt.Errorf("vmtest: no kernel package among the dependencies of linux-image-amd64:\n%s", out)
}

// resolveModules orders the wanted modules and their dependencies so each comes after what it
// needs. depmod has not run on an unpacked package, so dependencies come from each .ko's
// .modinfo section ("depends=a,b").
func resolveModules(tree string, wanted []string) ([]string, error) {
	paths := map[string]string{}
	filepath.WalkDir(tree, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".ko") {
			paths[normalize(strings.TrimSuffix(filepath.Base(p), ".ko"))] = p
		}
		return nil
	})
	var order []string
	seen := map[string]bool{}
	var visit func(string) error
	visit = func(m string) error {
		m = normalize(m)
		if seen[m] {
			return nil
		}
		seen[m] = true
		p, ok := paths[m]
		if !ok {
			return fmt.Errorf("vmtest: module %s not in %s (built in?)", m, tree)
		}
		deps, err := moduleDepends(p)
		if err != nil {
			return err
		}
		for _, d := range deps {
			if err := visit(d); err != nil {
				return err
			}
		}
		order = append(order, p)
		return nil
	}
	for _, m := range wanted {
		if err := visit(m); err != nil {
			return nil, err
		}
	}
	return order, nil
}

func normalize(m string) string { return strings.ReplaceAll(m, "-", "_") }

func moduleDepends(path string) ([]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("vmtest: open module %s: %w", path, err)
	}
	defer f.Close()
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, fmt.Errorf("vmtest: module %s has no .modinfo", path)
	}
	data, err := sec.Data()
	if err != nil {
		return nil, fmt.Errorf("vmtest: read .modinfo of %s: %w", path, err)
	}
	for _, kv := range bytes.Split(data, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("depends=")); ok {
			if len(v) == 0 {
				return nil, nil
			}
			return strings.Split(string(v), ","), nil
		}
	}
	return nil, nil
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("vmtest: %w", err)
	}
	if err := os.WriteFile(dst+".tmp", b, 0o644); err != nil {
		return fmt.Errorf("vmtest: %w", err)
	}
	return os.Rename(dst+".tmp", dst)
}
