// Package ivshmem is a VM's channel to gpuserverd: a file on the host (/dev/shm/gpucloud-<instance>)
// that QEMU maps into the VM as an ivshmem-plain PCI device (BAR 2) and gpuserverd maps here. The
// region is laid out as a shared arena (wire spec, shm_ctl: the two frame rings, then staging
// chunks and the guest's pinned heap) with a channel header in the control area, at HeaderOff:
//
//	+0   u64 magic "GCIVSHM1"   written last when the header is valid
//	+8   u32 version
//	+12  u32 state              StateUnserved .. StateResetting
//	+16  u64 size               the region's bytes
//	+24  u32 generation         bumped at every reset
//	+64  u64 server heartbeat   gpuserverd adds 1 every BeatPeriod
//	+128 u64 client heartbeat   the guest library adds 1 every BeatPeriod while it holds a claim
//
// The guest library's side is gpuserverd/guest/ivshmem.c. Nothing crosses the VM boundary but
// these bytes: no interrupt, no socket. So the rings' doorbell polls, a session's hello (with its
// token) travels in ring 0 like any frame, and either side's death is a heartbeat that stops or,
// for the guest, a generation that changes.
package ivshmem

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"gpucloud/gpuserverd/wire"
)

// Layout and protocol constants (see the package comment).
const (
	HeaderOff = 4096
	Magic     = 0x314d485356494347 // "GCIVSHM1", little endian
	Version   = 1
	// FilePrefix starts every channel file's name; the rest is the instance id. libvirt places an
	// ivshmem-plain device's backing file at /dev/shm/<shmem name> and refuses a name with '/'.
	FilePrefix = "gpucloud-"
	// BeatPeriod is how often each side advances its heartbeat.
	BeatPeriod = 100 * time.Millisecond
	// PeerTimeout is how long a heartbeat may stand still before its side is taken for gone.
	PeerTimeout = 5 * time.Second
)

// Channel states.
const (
	StateUnserved  uint32 = iota // a fresh file: no gpuserverd has set it up
	StateFree                    // waiting for a guest process to claim it
	StateClaimed                 // a guest process holds it: hello, then its session
	StateClosed                  // the guest process let it go (exit)
	StateResetting               // gpuserverd is clearing it for the next claim
)

// InstanceOf returns the instance id a channel file's name carries.
func InstanceOf(name string) (string, bool) {
	id, ok := strings.CutPrefix(name, FilePrefix)
	return id, ok && id != "" && !strings.ContainsAny(id, "/.")
}

// Channel is a mapped channel file.
type Channel struct {
	Path string
	File *os.File
	Mem  []byte
}

// CheckFile says why the file at fi cannot be a channel: not a regular file, a size outside
// [wire.ShmMin, wire.ShmMax] or not a power of two (a PCI BAR's size), or open to other users.
func CheckFile(fi os.FileInfo) error {
	switch {
	case !fi.Mode().IsRegular():
		return fmt.Errorf("not a regular file (%v)", fi.Mode().Type())
	case fi.Mode().Perm()&0o007 != 0:
		return fmt.Errorf("mode %v lets other users in; want 0600 or 0660", fi.Mode().Perm())
	case fi.Size() < wire.ShmMin || fi.Size() > wire.ShmMax:
		return fmt.Errorf("size %d outside [%d, %d]", fi.Size(), int64(wire.ShmMin), int64(wire.ShmMax))
	case fi.Size()&(fi.Size()-1) != 0:
		return fmt.Errorf("size %d is not a power of two (an ivshmem BAR's size)", fi.Size())
	}
	return nil
}

// Open maps the channel file at path after checking it (CheckFile).
func Open(path string) (*Channel, error) {
	f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("ivshmem: %w", err)
	}
	c, err := Adopt(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return c, nil
}

// Adopt maps an open channel file (a worker gets it as an inherited descriptor).
func Adopt(f *os.File) (*Channel, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("ivshmem: %w", err)
	}
	if err := CheckFile(fi); err != nil {
		return nil, fmt.Errorf("ivshmem: channel %s: %w", f.Name(), err)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("ivshmem: mapping %s: %w", f.Name(), err)
	}
	return &Channel{Path: f.Name(), File: f, Mem: mem}, nil
}

// Close unmaps the region and closes the file.
func (c *Channel) Close() error {
	err := unix.Munmap(c.Mem)
	return errors.Join(err, c.File.Close())
}

func (c *Channel) u32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&c.Mem[HeaderOff+off])) }
func (c *Channel) u64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&c.Mem[HeaderOff+off])) }

// State is the channel's state word.
func (c *Channel) State() uint32 { return atomic.LoadUint32(c.u32(12)) }

// Generation is bumped by every Reset.
func (c *Channel) Generation() uint32 { return atomic.LoadUint32(c.u32(24)) }

// ClientBeat is the guest's heartbeat.
func (c *Channel) ClientBeat() uint64 { return atomic.LoadUint64(c.u64(128)) }

// Beat advances the server's heartbeat.
func (c *Channel) Beat() { atomic.AddUint64(c.u64(64), 1) }

// Reset makes the channel ready for the next claim: no guest can claim it meanwhile, the rings
// are emptied, and the new generation tells a guest still holding the old one that its session
// has ended.
func (c *Channel) Reset() {
	atomic.StoreUint32(c.u32(12), StateResetting)
	for r := 0; r < 2; r++ { // the rings' head, tail and sleeping words
		for _, off := range []int{0, 64, 128, 192} {
			atomic.StoreUint32((*uint32)(unsafe.Pointer(&c.Mem[r*2048+off])), 0)
		}
	}
	atomic.StoreUint32(c.u32(8), Version)
	atomic.StoreUint64(c.u64(16), uint64(len(c.Mem)))
	atomic.AddUint32(c.u32(24), 1)
	atomic.StoreUint64(c.u64(128), 0)
	atomic.StoreUint64(c.u64(0), Magic)
	atomic.StoreUint32(c.u32(12), StateFree)
}

// Header is the channel header's fields as read from a region.
type Header struct {
	Magic      uint64
	Version    uint32
	State      uint32
	Size       uint64
	Generation uint32
}

// ParseHeader reads and checks the channel header at the start of mem (the region's first
// HeaderOff+192 bytes at least), as the guest library does before it claims a channel.
func ParseHeader(mem []byte) (Header, error) {
	var h Header
	if len(mem) < HeaderOff+192 {
		return h, fmt.Errorf("ivshmem: region of %d bytes is too small for a channel header", len(mem))
	}
	le := func(off, n int) uint64 {
		var v uint64
		for i := n - 1; i >= 0; i-- {
			v = v<<8 | uint64(mem[HeaderOff+off+i])
		}
		return v
	}
	h = Header{Magic: le(0, 8), Version: uint32(le(8, 4)), State: uint32(le(12, 4)), Size: le(16, 8), Generation: uint32(le(24, 4))}
	switch {
	case h.Magic != Magic:
		return h, fmt.Errorf("ivshmem: no channel header (magic %#x): gpuserverd does not serve this region", h.Magic)
	case h.Version != Version:
		return h, fmt.Errorf("ivshmem: channel header version %d, want %d", h.Version, Version)
	case h.Size != uint64(len(mem)):
		return h, fmt.Errorf("ivshmem: channel header says %d bytes, the region has %d", h.Size, len(mem))
	case h.State > StateResetting:
		return h, fmt.Errorf("ivshmem: channel state %d unknown", h.State)
	}
	return h, nil
}
