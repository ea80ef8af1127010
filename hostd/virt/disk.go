package virt

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
)

// CreateOverlay makes a copy-on-write qcow2 disk of sizeGiB over a qcow2 base image. The base is
// never written; deleting the overlay deletes the VM's disk. It is created under a temporary
// name and renamed, so a hostd killed mid-way leaves no half disk that looks finished.
func CreateOverlay(ctx context.Context, base, overlay string, sizeGiB int) error {
	if _, err := os.Stat(overlay); err == nil {
		return nil
	}
	if _, err := os.Stat(base); err != nil {
		return fmt.Errorf("virt: base image: %w", err)
	}
	tmp := overlay + ".tmp"
	os.Remove(tmp)
	cmd := exec.CommandContext(ctx, "qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", base, tmp, fmt.Sprintf("%dG", sizeGiB))
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("virt: qemu-img create overlay over %s: %w: %s", base, err, bytes.TrimSpace(out))
	}
	if err := os.Rename(tmp, overlay); err != nil {
		return fmt.Errorf("virt: install overlay: %w", err)
	}
	return nil
}

// Rebase points an overlay copied from another host at this host's copy of its base image (the
// same bytes under another path); only the header changes (qemu-img rebase -u).
func Rebase(ctx context.Context, overlay, base string) error {
	if _, err := os.Stat(base); err != nil {
		return fmt.Errorf("virt: base image: %w", err)
	}
	cmd := exec.CommandContext(ctx, "qemu-img", "rebase", "-u", "-f", "qcow2", "-F", "qcow2", "-b", base, overlay)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("virt: qemu-img rebase %s onto %s: %w: %s", overlay, base, err, bytes.TrimSpace(out))
	}
	return nil
}

// Tail returns up to n bytes from the end of a file (the console log); a missing file is empty.
func Tail(path string, n int64) (string, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("virt: open %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("virt: stat %s: %w", path, err)
	}
	off := st.Size() - n
	if off < 0 {
		off = 0
	}
	b, err := io.ReadAll(io.NewSectionReader(f, off, st.Size()-off))
	if err != nil {
		return "", fmt.Errorf("virt: read %s: %w", path, err)
	}
	return string(b), nil
}

// CheckImported vets a disk that came from another host before anything opens it as a VM's: a
// source hostd is not trusted with this host's files, so the file must be a plain qcow2 of at
// most maxBytes of virtual size, without an external data file (which would read any file of this
// host), and without a backing file unless backing is allowed (a root overlay, which Rebase then
// points at this host's base image).
func CheckImported(ctx context.Context, path string, maxBytes int64, backing bool) error {
	out, err := exec.CommandContext(ctx, "qemu-img", "info", "--output=json", "-f", "qcow2", path).Output()
	if err != nil {
		return fmt.Errorf("virt: %s is no qcow2 image: %w", filepath.Base(path), err)
	}
	var info struct {
		Format         string `json:"format"`
		VirtualSize    int64  `json:"virtual-size"`
		Backing        string `json:"backing-filename"`
		FormatSpecific struct {
			Data struct {
				DataFile string `json:"data-file"`
			} `json:"data"`
		} `json:"format-specific"`
	}
	if err := json.Unmarshal(out, &info); err != nil {
		return fmt.Errorf("virt: qemu-img info %s: %w", filepath.Base(path), err)
	}
	switch {
	case info.Format != "qcow2":
		return fmt.Errorf("virt: %s is %q, not qcow2", filepath.Base(path), info.Format)
	case info.FormatSpecific.Data.DataFile != "":
		return fmt.Errorf("virt: %s names an external data file; refused", filepath.Base(path))
	case info.Backing != "" && !backing:
		return fmt.Errorf("virt: %s names a backing file; refused", filepath.Base(path))
	case info.VirtualSize > maxBytes:
		return fmt.Errorf("virt: %s is %d bytes, more than the %d its VM holds", filepath.Base(path), info.VirtualSize, maxBytes)
	}
	return nil
}
