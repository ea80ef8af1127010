package vmtest

import (
	"fmt"
	"io"
	"os"
)

// File is a file to add to a guest's initramfs.
type File struct {
	Name string // path inside the guest, without the leading '/'
	Data []byte
	Mode uint32 // permission bits
}

// WithOverlay writes an initramfs at dst that is g's with files added over it (an "init" among
// them replaces the guest's): a second archive appended to the first, which the kernel unpacks
// in order. Other tests can so boot the same kernel and busybox with their own program and init.
func (g Guest) WithOverlay(dst string, files ...File) (Guest, error) {
	var cf []cpioFile
	for _, f := range files {
		cf = append(cf, cpioFile{name: f.Name, data: f.Data, mode: f.Mode})
	}
	overlay := dst + ".overlay"
	if err := writeInitramfs(overlay, cf); err != nil {
		return g, err
	}
	defer os.Remove(overlay)
	out, err := os.Create(dst)
	if err != nil {
		return g, fmt.Errorf("vmtest: %w", err)
	}
	defer out.Close()
	for _, part := range []string{g.Initrd, overlay} {
		in, err := os.Open(part)
		if err != nil {
			return g, fmt.Errorf("vmtest: %w", err)
		}
		_, err = io.Copy(out, in)
		in.Close()
		if err != nil {
			return g, fmt.Errorf("vmtest: %w", err)
		}
	}
	if err := out.Close(); err != nil {
		return g, fmt.Errorf("vmtest: %w", err)
	}
	return Guest{Kernel: g.Kernel, Initrd: dst}, nil
}
