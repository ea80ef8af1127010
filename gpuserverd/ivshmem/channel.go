// Package ivshmem is a VM's channel to gpuserverd: a file on the host (/dev/shm/gpucloud-<instance>)
// that QEMU maps into the VM as an ivshmem-plain PCI device (BAR 2) and gpuserverd maps here. The
// region is split into N equal slots (N a power of two, each at least wire.ShmMin bytes), each an
// independent channel serving one guest process at a time: slot i is [i*size, (i+1)*size), laid out
// as a shared arena (wire spec, shm_ctl: the two frame rings, then staging chunks and the guest's
// pinned heap) with a slot header in its control area, at HeaderOff from the slot's start:
//
//	+0   u64 magic "GCIVSHM1"   written last when the header is valid
//	+8   u32 version (2)
//	+12  u32 state              StateUnserved .. StateResetting
//	+16  u64 size               the slot's bytes
//	+24  u32 generation         bumped at every reset
//	+28  u32 slots              N, the same in every slot
//	+32  u32 index              this slot's number, 0..N-1
//	+64  u64 server heartbeat   gpuserverd adds 1 every BeatPeriod
//	+128 u64 client heartbeat   the guest library adds 1 every BeatPeriod while it holds a claim
//
// The guest library's side is gpuserverd/guest/transport/ivshmem.c. Nothing crosses the VM boundary but
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
	Version   = 2
	// MaxSlots bounds a region's slots (a VM's processes with a session at once).
	MaxSlots = 64
	// slotAuto is the slot size SlotCount aims at when not told: a 256 MiB region (hostd's default)
	// is 4 slots, each with room for a 45 MiB pinned heap.
	slotAuto     = 64 << 20
	autoMaxSlots = 4
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

// Channel is a mapped channel file, or one slot of it (Slots, AdoptSlot): Mem is the slot's
// bytes, and Index and Count say which of how many it is.
type Channel struct {
	Path         string
	File         *os.File
	Mem          []byte
	Index, Count int
	view         bool // a slot of a mapping that Close of the whole unmaps
}

// SlotCount is how many slots a region of size bytes is split into: want (0: one per 64 MiB, at
// most 4), lowered to a power of two that leaves every slot at least wire.ShmMin bytes.
func SlotCount(size int64, want int) int {
	if want <= 0 {
		want = int(min(size/slotAuto, autoMaxSlots))
	}
	n := 1
	for n*2 <= min(want, MaxSlots) && size/int64(n*2) >= wire.ShmMin {
		n *= 2
	}
	return n
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
	return &Channel{Path: f.Name(), File: f, Mem: mem, Count: 1}, nil
}

// AdoptSlot maps slot index of count from an open channel file: a worker maps (and registers
// with the driver) only the slot its session runs in.
func AdoptSlot(f *os.File, index, count int) (*Channel, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("ivshmem: %w", err)
	}
	if err := CheckFile(fi); err != nil {
		return nil, fmt.Errorf("ivshmem: channel %s: %w", f.Name(), err)
	}
	if count < 1 || count > MaxSlots || index < 0 || index >= count || SlotCount(fi.Size(), count) != count {
		return nil, fmt.Errorf("ivshmem: channel %s of %d bytes has no slot %d of %d", f.Name(), fi.Size(), index, count)
	}
	size := fi.Size() / int64(count)
	mem, err := unix.Mmap(int(f.Fd()), int64(index)*size, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("ivshmem: mapping slot %d of %s: %w", index, f.Name(), err)
	}
	return &Channel{Path: f.Name(), File: f, Mem: mem, Index: index, Count: count}, nil
}

// Slots splits a mapped region into n slots (n from SlotCount), views sharing its mapping and file.
func (c *Channel) Slots(n int) []*Channel {
	size := len(c.Mem) / n
	out := make([]*Channel, n)
	for i := range out {
		out[i] = &Channel{Path: c.Path, File: c.File, Mem: c.Mem[i*size : (i+1)*size : (i+1)*size], Index: i, Count: n, view: true}
	}
	return out
}

// Retire ends the sessions of the layout a region had before (a restarted gpuserverd may split
// it differently): every slot header the old layout names is marked resetting with a new
// generation, so a guest still holding one sees its session end rather than a rewritten region.
func (c *Channel) Retire() {
	if len(c.Mem) < HeaderOff+192 {
		return
	}
	h := rawHeader(c.Mem)
	if h.Magic != Magic || h.Slots == 0 || h.Slots > MaxSlots || h.Size*uint64(h.Slots) != uint64(len(c.Mem)) {
		return // no layout, or one that cannot have been ours
	}
	for _, s := range c.Slots(int(h.Slots)) {
		atomic.StoreUint32(s.u32(12), StateResetting)
		atomic.AddUint32(s.u32(24), 1)
	}
}

// Close unmaps the region and closes the file (a slot view: nothing, its region's Close does).
func (c *Channel) Close() error {
	if c.view {
		return nil
	}
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
	atomic.StoreUint32(c.u32(28), uint32(max(c.Count, 1)))
	atomic.StoreUint32(c.u32(32), uint32(c.Index))
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
	Slots      uint32
	Index      uint32
}

// ParseHeader reads and checks the slot header at the start of mem (one slot's bytes), as the
// guest library does before it claims a slot.
func ParseHeader(mem []byte) (Header, error) {
	if len(mem) < HeaderOff+192 {
		return Header{}, fmt.Errorf("ivshmem: region of %d bytes is too small for a channel header", len(mem))
	}
	h := rawHeader(mem)
	switch {
	case h.Magic != Magic:
		return h, fmt.Errorf("ivshmem: no channel header (magic %#x): gpuserverd does not serve this region", h.Magic)
	case h.Version != Version:
		return h, fmt.Errorf("ivshmem: channel header version %d, want %d", h.Version, Version)
	case h.Size != uint64(len(mem)):
		return h, fmt.Errorf("ivshmem: channel header says %d bytes, the region has %d", h.Size, len(mem))
	case h.Slots == 0 || h.Slots > MaxSlots || h.Index >= h.Slots:
		return h, fmt.Errorf("ivshmem: channel header names slot %d of %d (at most %d)", h.Index, h.Slots, MaxSlots)
	case h.State > StateResetting:
		return h, fmt.Errorf("ivshmem: channel state %d unknown", h.State)
	}
	return h, nil
}

// rawHeader reads the header fields at HeaderOff of mem (at least HeaderOff+192 bytes), unchecked.
func rawHeader(mem []byte) Header {
	le := func(off, n int) uint64 {
		var v uint64
		for i := n - 1; i >= 0; i-- {
			v = v<<8 | uint64(mem[HeaderOff+off+i])
		}
		return v
	}
	return Header{Magic: le(0, 8), Version: uint32(le(8, 4)), State: uint32(le(12, 4)), Size: le(16, 8),
		Generation: uint32(le(24, 4)), Slots: uint32(le(28, 4)), Index: uint32(le(32, 4))}
}
