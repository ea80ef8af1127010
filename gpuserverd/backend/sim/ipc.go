package sim

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"gpucloud/gpuserverd/backend"
)

// IPC between worker processes (issue 14), simulated: what is shared lives in a memfd that both
// processes map. Memory exported with cuIpcGetMemHandle or cuMemPoolExportPointer moves into
// one when first exported (after the context's streams are idle); cuMemCreate allocations made
// with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR and interprocess events live in one from the
// start. The blob names the kind and the size; the descriptor is the memfd itself, which the
// worker's registry hands the importing worker. Pools are matched by a random identity: a
// pointer exported from a pool imports only into that pool's import.
//
// A test double's simplifications: an imported mapping stays mapped until the process ends; an
// interprocess event is a pair of counters (records issued, last completed), so a wait is for
// the last record issued when it began and polls.

var _ backend.IPC = (*Context)(nil)

const ipcMagic = "gcsimipc"

// ipcObjects is a context's shared objects. Guarded by Context.mu.
type ipcObjects struct {
	files   map[uint64]*os.File         // exported memory (address or allocation handle) -> its memfd
	poolIDs map[backend.Handle][16]byte // exported or imported pools -> identity
	access  map[poolLocation]uint32     // cuMemPoolSetAccess
}

func ipcBlob(kind uint32, size uint64, id [16]byte) []byte {
	b := append([]byte(ipcMagic), 0, 0, 0, 0)
	binary.LittleEndian.PutUint32(b[len(ipcMagic):], kind)
	b = binary.LittleEndian.AppendUint64(b, size)
	return append(b, id[:]...)
}

func parseIpcBlob(kind uint32, b []byte) (size uint64, id [16]byte, err error) {
	if len(b) != len(ipcMagic)+4+8+16 || !bytes.HasPrefix(b, []byte(ipcMagic)) ||
		binary.LittleEndian.Uint32(b[len(ipcMagic):]) != kind {
		return 0, id, fmt.Errorf("sim ipc: not a simulated handle of kind %d: %w", kind, backend.ErrInvalidHandle)
	}
	copy(id[:], b[len(ipcMagic)+12:])
	return binary.LittleEndian.Uint64(b[len(ipcMagic)+4:]), id, nil
}

// sharedBytes makes a memfd of n bytes (at least one page) and maps it.
func sharedBytes(name string, n uint64) (*os.File, []byte, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, nil, fmt.Errorf("sim ipc: memfd: %v: %w", err, backend.ErrOutOfMemory)
	}
	f := os.NewFile(uintptr(fd), name)
	size := max(n, 4096)
	if err := f.Truncate(int64(size)); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("sim ipc: memfd of %d bytes: %v: %w", n, err, backend.ErrOutOfMemory)
	}
	b, err := mapShared(f, size)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, b[:n], nil
}

func mapShared(f *os.File, size uint64) ([]byte, error) {
	b, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("sim ipc: map %d bytes: %v: %w", size, err, backend.ErrInvalidHandle)
	}
	return b, nil
}

// dupFile is a copy of f the caller owns.
func dupFile(f *os.File) (*os.File, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sim ipc: dup: %v: %w", err, backend.ErrOutOfMemory)
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

func (c *Context) IpcExport(kind uint32, object uint64, handleType uint32) ([]byte, *os.File, error) {
	switch kind {
	case backend.IpcMemory, backend.IpcPoolPointer:
		return c.exportMemory(kind, object)
	case backend.IpcEvent:
		e, err := c.event(backend.Handle(object))
		if err != nil {
			return nil, nil, err
		}
		if e.shared == nil {
			return nil, nil, fmt.Errorf("event %d: not created with CU_EVENT_INTERPROCESS: %w", object, backend.ErrInvalidValue)
		}
		f, err := dupFile(e.shared.file)
		return ipcBlob(kind, 0, [16]byte{}), f, err
	case backend.IpcAllocation:
		if handleType != 1 {
			return nil, nil, fmt.Errorf("export as handle type %d: only POSIX file descriptors: %w", handleType, backend.ErrNotSupported)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		p, ok := c.fam.physical[backend.Handle(object)]
		if !ok {
			return nil, nil, fmt.Errorf("export of allocation %d: %w", object, backend.ErrInvalidHandle)
		}
		f := c.fam.ipc.files[object]
		if p.props.HandleTypes&1 == 0 || f == nil {
			return nil, nil, fmt.Errorf("export of allocation %d: not created exportable as a POSIX file descriptor: %w", object, backend.ErrInvalidValue)
		}
		d, err := dupFile(f)
		return ipcBlob(kind, uint64(len(p.data)), [16]byte{}), d, err
	case backend.IpcPool:
		if handleType != 1 {
			return nil, nil, fmt.Errorf("export as handle type %d: only POSIX file descriptors: %w", handleType, backend.ErrNotSupported)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		p, err := c.namedPoolLocked(backend.Handle(object))
		if err != nil {
			return nil, nil, err
		}
		if p.props.HandleTypes&1 == 0 {
			return nil, nil, fmt.Errorf("export of pool %d: not created exportable as a POSIX file descriptor: %w", object, backend.ErrInvalidValue)
		}
		return ipcBlob(kind, 0, c.poolIdentityLocked(backend.Handle(object))), nil, nil
	}
	return nil, nil, fmt.Errorf("export of kind %d: %w", kind, backend.ErrInvalidValue)
}

// poolIdentityLocked is the identity of an exportable pool (made on first use), zero for a pool
// not created exportable as a POSIX file descriptor. c.mu held.
func (c *Context) poolIdentityLocked(ph backend.Handle) [16]byte {
	id, ok := c.fam.ipc.poolIDs[ph]
	if p := c.fam.pools[ph]; !ok && p != nil && p.props.HandleTypes&1 != 0 {
		rand.Read(id[:])
		if c.fam.ipc.poolIDs == nil {
			c.fam.ipc.poolIDs = map[backend.Handle][16]byte{}
		}
		c.fam.ipc.poolIDs[ph] = id
	}
	return id
}

// exportMemory moves the allocation at ptr into a memfd (once) and gives a copy of it.
func (c *Context) exportMemory(kind uint32, ptr uint64) ([]byte, *os.File, error) {
	var id [16]byte
	c.mu.Lock()
	a, isPool := c.fam.asyncAllocs[ptr]
	if isPool {
		id = c.poolIdentityLocked(a.pool)
	}
	f := c.fam.ipc.files[ptr]
	c.mu.Unlock()
	if (kind == backend.IpcPoolPointer) != isPool || (isPool && id == [16]byte{}) {
		return nil, nil, fmt.Errorf("export of %#x: not an allocation of this kind (%d), or its pool is not exportable: %w", ptr, kind, backend.ErrInvalidValue)
	}
	c.mem.mu.Lock()
	al, ok := c.mem.alloc[ptr]
	c.mem.mu.Unlock()
	if !ok || (al.mapped && !isPool) {
		return nil, nil, fmt.Errorf("export of %#x: not the start of an allocation: %w", ptr, backend.ErrInvalidValue)
	}
	if f == nil {
		if err := c.Synchronize(); err != nil { // no stream may hold the old bytes
			return nil, nil, err
		}
		nf, b, err := sharedBytes("gpucloud-sim-ipc", uint64(len(al.data)))
		if err != nil {
			return nil, nil, err
		}
		c.mem.mu.Lock()
		copy(b, al.data)
		al.data = b
		c.mem.mu.Unlock()
		c.mu.Lock()
		if c.fam.ipc.files == nil {
			c.fam.ipc.files = map[uint64]*os.File{}
		}
		c.fam.ipc.files[ptr], f = nf, nf
		c.mu.Unlock()
	}
	d, err := dupFile(f)
	return ipcBlob(kind, uint64(len(al.data)), id), d, err
}

func (c *Context) IpcImport(kind uint32, blob []byte, f *os.File, ph backend.Handle, flags uint32) (uint64, error) {
	size, id, err := parseIpcBlob(kind, blob)
	if err != nil {
		return 0, err
	}
	if kind == backend.IpcPool {
		c.mu.Lock()
		defer c.mu.Unlock()
		h := c.handle()
		if c.fam.pools == nil {
			c.fam.pools = map[backend.Handle]*pool{}
		}
		c.fam.pools[h] = newPool(backend.PoolProps{AllocType: 1, HandleTypes: 1, LocationType: 1})
		if c.fam.ipc.poolIDs == nil {
			c.fam.ipc.poolIDs = map[backend.Handle][16]byte{}
		}
		c.fam.ipc.poolIDs[h] = id
		return uint64(h), nil
	}
	if f == nil {
		return 0, fmt.Errorf("sim ipc: a handle of kind %d without its memfd: %w", kind, backend.ErrInvalidHandle)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || uint64(st.Size) < max(size, 4096) {
		return 0, fmt.Errorf("sim ipc: the memfd is not the exported object's: %w", backend.ErrInvalidHandle)
	}
	switch kind {
	case backend.IpcEvent:
		mem, err := mapShared(f, 4096)
		if err != nil {
			return 0, err
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		h := c.handle()
		c.events[h] = &event{noTiming: true, shared: &sharedEvent{mem: mem}}
		return uint64(h), nil
	case backend.IpcAllocation:
		mem, err := mapShared(f, max(size, 4096))
		if err != nil {
			return 0, err
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.fam.physical == nil {
			c.fam.physical = map[backend.Handle]*physical{}
		}
		h := c.handle()
		// The exporter's device paid for the bytes: this one reserves none (and frees none).
		c.fam.physical[h] = &physical{props: backend.AllocProps{Type: 1, LocationType: 1, HandleTypes: 1, Size: size},
			data: mem[:size], refs: 1, imported: true}
		return uint64(h), nil
	case backend.IpcMemory, backend.IpcPoolPointer:
		if kind == backend.IpcPoolPointer {
			c.mu.Lock()
			pid, ok := c.fam.ipc.poolIDs[ph]
			c.mu.Unlock()
			if !ok || pid != id {
				return 0, fmt.Errorf("sim ipc: the pointer is not of pool %d's exporter: %w", ph, backend.ErrInvalidValue)
			}
		}
		mem, err := mapShared(f, max(size, 4096))
		if err != nil {
			return 0, err
		}
		ptr := c.mem.place(&allocation{data: mem[:size], mapped: true, access: true})
		if kind == backend.IpcPoolPointer {
			c.mu.Lock()
			if c.fam.asyncAllocs == nil {
				c.fam.asyncAllocs = map[uint64]asyncAlloc{}
			}
			c.fam.asyncAllocs[ptr] = asyncAlloc{pool: ph} // frees give back nothing
			c.mu.Unlock()
		}
		return ptr, nil
	}
	return 0, fmt.Errorf("sim ipc: import of kind %d: %w", kind, backend.ErrInvalidValue)
}

func (c *Context) IpcCloseMemory(ptr uint64) error {
	c.mem.mu.Lock()
	a, ok := c.mem.alloc[ptr]
	c.mem.mu.Unlock()
	if !ok || !a.mapped {
		return fmt.Errorf("sim ipc: close of %#x: not imported memory: %w", ptr, backend.ErrInvalidValue)
	}
	c.mem.drop(ptr)
	return nil
}

// sharedEvent is an interprocess event's state in a page both processes map: the number of
// records issued and the highest one completed.
type sharedEvent struct {
	mem       []byte
	file      *os.File    // the exporter's memfd; nil in an importer
	abandoned atomic.Bool // the context is closing: waits end (a record another process
	// issued may never complete: that process may have ended)
}

func (e *sharedEvent) abandon() { e.abandoned.Store(true) }

func newSharedEvent() (*sharedEvent, error) {
	f, mem, err := sharedBytes("gpucloud-sim-event", 4096)
	if err != nil {
		return nil, err
	}
	return &sharedEvent{mem: mem, file: f}, nil
}

func (e *sharedEvent) issued() *uint64    { return (*uint64)(unsafe.Pointer(&e.mem[0])) }
func (e *sharedEvent) completed() *uint64 { return (*uint64)(unsafe.Pointer(&e.mem[8])) }

// record issues a record; finish(gen) marks it complete.
func (e *sharedEvent) record() uint64 { return atomic.AddUint64(e.issued(), 1) }

func (e *sharedEvent) finish(gen uint64) {
	for {
		cur := atomic.LoadUint64(e.completed())
		if cur >= gen || atomic.CompareAndSwapUint64(e.completed(), cur, gen) {
			return
		}
	}
}

// target is the record a wait that begins now waits for.
func (e *sharedEvent) target() uint64 { return atomic.LoadUint64(e.issued()) }

func (e *sharedEvent) reached(gen uint64) bool { return atomic.LoadUint64(e.completed()) >= gen }

// wait polls until record gen has completed (in whichever process recorded it).
func (e *sharedEvent) wait(gen uint64) {
	for d := 20 * time.Microsecond; !e.reached(gen) && !e.abandoned.Load(); d = min(2*d, time.Millisecond) {
		time.Sleep(d)
	}
}

var _ backend.PoolAccess = (*Context)(nil)

// MemPoolGetAccess: the simulated device (location 0) may always read and write its pools, an
// imported one included; the host and other devices have what was set (none by default).
func (c *Context) MemPoolGetAccess(ph backend.Handle, locType uint32, locID int32) (uint32, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := c.namedPoolLocked(ph); err != nil {
		return 0, err
	}
	if locType == 1 && locID == 0 {
		return 3, nil
	}
	return c.fam.ipc.access[poolLocation{ph, locType, locID}], nil
}

func (c *Context) MemPoolSetAccess(ph backend.Handle, locType uint32, locID int32, flags uint32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := c.namedPoolLocked(ph); err != nil {
		return err
	}
	if flags == 2 || flags > 3 || locType != 1 || (locID == 0 && flags != 3) {
		return fmt.Errorf("pool %d: access %d for location %d/%d: %w", ph, flags, locType, locID, backend.ErrInvalidValue)
	}
	if locID >= int32(len(c.b.devices)) || locID < 0 {
		return fmt.Errorf("pool %d: access for device %d: %w", ph, locID, backend.ErrInvalidDevice)
	}
	if c.fam.ipc.access == nil {
		c.fam.ipc.access = map[poolLocation]uint32{}
	}
	c.fam.ipc.access[poolLocation{ph, locType, locID}] = flags
	return nil
}

type poolLocation struct {
	pool    backend.Handle
	locType uint32
	locID   int32
}
