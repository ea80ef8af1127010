package reconcile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"gpucloud/api"
	"gpucloud/hostd/virt"
)

// A GPU instance whose gpuserverd runs on this host gets an ivshmem channel: a file that QEMU
// maps into the VM as an ivshmem-plain device and gpuserverd (--ivshmem-dir) maps too, so the
// guest library reaches its GPU through shared memory instead of TCP (docs/gpuserverd/transports.md, "VMs
// on this host"). hostd creates the file before the domain is defined, one per instance and never
// shared, 0660 with the group QEMU and gpuserverd share (0600 without one), and removes it with
// the instance.

// IvshmemConfig turns channels on.
type IvshmemConfig struct {
	// GPUServerID is the local gpuserverd: instances granted GPUs on it get a channel.
	GPUServerID string
	// Dir holds the channel files: /dev/shm, where libvirt has QEMU open <shmem name>.
	Dir string
	// Bytes is each channel's size: a power of two in [16 MiB, 16 GiB].
	Bytes uint64
	// GID owns the files with mode 0660 (QEMU's and gpuserverd's group); -1: 0600, owner only.
	GID int
}

// channelPrefix matches gpuserverd/ivshmem.FilePrefix: gpuserverd serves gpucloud-<instance>.
const channelPrefix = "gpucloud-"

func (c *IvshmemConfig) validate() error {
	switch {
	case c.GPUServerID == "" || c.Dir == "":
		return errors.New("ivshmem: the local GPU server id and the channel dir are required")
	case c.Bytes < 16<<20 || c.Bytes > 16<<30 || c.Bytes&(c.Bytes-1) != 0:
		return fmt.Errorf("ivshmem: channel size %d: want a power of two in [16 MiB, 16 GiB]", c.Bytes)
	}
	return nil
}

// channelFor says whether instance d gets a channel, and its shmem device.
func (r *Reconciler) channelFor(d api.DesiredInstance) *virt.Shmem {
	c := r.cfg.Ivshmem
	if c == nil || d.GPU == nil || d.GPU.GPUServerID != c.GPUServerID {
		return nil
	}
	return &virt.Shmem{Name: channelPrefix + d.ID, Bytes: c.Bytes}
}

func (r *Reconciler) channelPath(id string) string {
	return filepath.Join(r.cfg.Ivshmem.Dir, channelPrefix+id)
}

// createChannel makes the instance's channel file, or checks the one a killed pass left. A file
// that is not a regular one of ours (a symlink planted in /dev/shm, another owner) is refused.
func (r *Reconciler) createChannel(id string) error {
	c := r.cfg.Ivshmem
	path := r.channelPath(id)
	mode := os.FileMode(0o600)
	if c.GID >= 0 {
		mode = 0o660
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, mode)
	if err != nil {
		return fmt.Errorf("ivshmem channel %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("ivshmem channel %s: %w", path, err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !fi.Mode().IsRegular() || !ok || int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("ivshmem channel %s: not a regular file of this user", path)
	}
	if c.GID >= 0 {
		if err := f.Chown(-1, c.GID); err != nil {
			return fmt.Errorf("ivshmem channel %s: group: %w", path, err)
		}
	}
	if err := f.Chmod(mode); err != nil { // the umask may have taken bits away
		return fmt.Errorf("ivshmem channel %s: mode: %w", path, err)
	}
	if fi.Size() != int64(c.Bytes) {
		if err := f.Truncate(int64(c.Bytes)); err != nil {
			return fmt.Errorf("ivshmem channel %s: size: %w", path, err)
		}
	}
	return nil
}

// removeChannel removes the instance's channel file, if any.
func (r *Reconciler) removeChannel(id string) error {
	if r.cfg.Ivshmem == nil {
		return nil
	}
	if err := os.Remove(r.channelPath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove ivshmem channel of %s: %w", id, err)
	}
	return nil
}

// leftoverChannels lists channel files of instances neither wanted nor defined: regular files of
// hostd's own user, as createChannel makes them. Anything else with the prefix in the shared
// directory (/dev/shm is everyone's) is not hostd's to remove: CI once had hostd try to remove
// another test's directory named gpucloud-test-..., failing its pass.
func (r *Reconciler) leftoverChannels(keep func(id string) bool) []string {
	if r.cfg.Ivshmem == nil {
		return nil
	}
	entries, _ := os.ReadDir(r.cfg.Ivshmem.Dir)
	var ids []string
	for _, e := range entries {
		id, ok := strings.CutPrefix(e.Name(), channelPrefix)
		if !ok || !e.Type().IsRegular() || virt.ValidID(id) != nil || keep(id) {
			continue
		}
		if fi, err := e.Info(); err != nil || !ownedByUs(fi) {
			continue
		}
		ids = append(ids, id)
	}
	return ids
}

// ownedByUs says whether fi belongs to this process's effective user.
func ownedByUs(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Geteuid()
}
