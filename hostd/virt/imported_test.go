package virt_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"gpucloud/hostd/virt"
)

// A disk from another host is vetted before any VM opens it: a plain qcow2 within the VM's size
// passes (with a backing file only where one is allowed); an external data file, a backing file
// on a volume, a bigger disk and a raw file are refused.
func TestCheckImported(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	img := func(name, format, size string) string {
		p := filepath.Join(dir, name)
		if out, err := exec.Command("qemu-img", "create", "-q", "-f", format, p, size).CombinedOutput(); err != nil {
			t.Fatalf("qemu-img create %s: %v %s", name, err, out)
		}
		return p
	}
	raw := img("raw.img", "raw", "1M")
	plain := img("plain.qcow2", "qcow2", "1G")
	overlay := filepath.Join(dir, "overlay.qcow2")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-b", plain, "-F", "qcow2", overlay, "1G").CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	dataFile := filepath.Join(dir, "datafile.qcow2")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-o", "data_file="+raw, dataFile, "1M").CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	for _, c := range []struct {
		path    string
		max     int64
		backing bool
		refused string
	}{
		{plain, 1 << 30, false, ""},
		{overlay, 1 << 30, true, ""},
		{overlay, 1 << 30, false, "backing file"},
		{plain, 1 << 29, false, "more than"},
		{dataFile, 1 << 30, true, "external data file"},
		{raw, 1 << 30, true, "no qcow2"},
	} {
		err := virt.CheckImported(ctx, c.path, c.max, c.backing)
		if c.refused == "" && err != nil || c.refused != "" && (err == nil || !strings.Contains(err.Error(), c.refused)) {
			t.Errorf("%s (max %d, backing %v): %v, want %q", filepath.Base(c.path), c.max, c.backing, err, c.refused)
		}
	}
}
