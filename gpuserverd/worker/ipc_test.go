package worker

import (
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/backend/sim"
	"gpucloud/gpuserverd/wire"
)

// memRegistry is the server's registry in memory, for two sessions of one process; it records
// what each side told it.
type memRegistry struct {
	mu      sync.Mutex
	entries map[[IpcKeyLen]byte]memEntry
	ops     []string
}

type memEntry struct {
	blob []byte
	fd   *os.File
}

func (r *memRegistry) note(op string) {
	r.mu.Lock()
	r.ops = append(r.ops, op)
	r.mu.Unlock()
}

func (r *memRegistry) export(kind byte, device uint32, bytes uint64, blob []byte, fd *os.File) ([IpcKeyLen]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := [IpcKeyLen]byte{byte(len(r.entries) + 1), kind}
	r.entries[key] = memEntry{append([]byte(nil), blob...), fd}
	r.ops = append(r.ops, "export")
	return key, nil
}

func (r *memRegistry) open(kind byte, key [IpcKeyLen]byte) ([]byte, *os.File, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.entries[key]
	if !ok {
		return nil, nil, errForeignHandle
	}
	var f *os.File
	if e.fd != nil {
		nfd, err := syscall.Dup(int(e.fd.Fd()))
		if err != nil {
			return nil, nil, err
		}
		f = os.NewFile(uintptr(nfd), "ipc")
	}
	r.ops = append(r.ops, "open")
	return e.blob, f, nil
}

func (r *memRegistry) close(kind byte, key [IpcKeyLen]byte) error  { r.note("close"); return nil }
func (r *memRegistry) unlist(kind byte, key [IpcKeyLen]byte) error { r.note("unlist"); return nil }

// Memory one session exports another opens; the importer may not free or re-export it, closes it
// instead, and each end is told to the registry; the exporter's free unlists its entry.
func TestIpcMemoryBetweenSessions(t *testing.T) {
	reg := &memRegistry{entries: map[[IpcKeyLen]byte]memEntry{}}
	cfg := Config{Tier: "shared", MemoryQuota: 16 << 20, Devices: []int{0}}
	a, sa := startSession(t, cfg, false)
	b, sb := startSession(t, cfg, false)
	var key wire.IpcKeyReply
	a.call(&wire.IpcExport{Kind: backend.IpcMemory, Object: 1}, &key)
	if backend.Result(key.Result) != backend.ErrNotSupported {
		t.Fatalf("export without a registry: %d", key.Result)
	}
	sa.SetIpcRegistry(reg)
	sb.SetIpcRegistry(reg)
	var h wire.HandleReply
	a.call(&wire.MemAlloc{Bytes: 8 << 20}, &h)
	p := h.Handle
	var st wire.Status
	a.call(&wire.MemcpyHtoD{Dst: p, Data: []byte("shared")}, &st)
	a.call(&wire.IpcExport{Kind: backend.IpcMemory, Object: p + 512}, &key)
	if backend.Result(key.Result) != backend.ErrInvalidValue {
		t.Fatalf("export of an interior pointer: %d", key.Result)
	}
	a.call(&wire.IpcExport{Kind: backend.IpcMemory, Object: p}, &key)
	var again wire.IpcKeyReply
	a.call(&wire.IpcExport{Kind: backend.IpcMemory, Object: p}, &again)
	if key.Result != 0 || string(again.Key) != string(key.Key) || len(reg.ops) != 1 {
		t.Fatalf("exports: %+v %+v, registry %v", key, again, reg.ops)
	}
	var mi wire.MemGetInfoReply
	a.call(&wire.MemGetInfo{}, &mi)
	if mi.Free != 16<<20 {
		t.Fatalf("the export is still the session's: free %d", mi.Free) // the registry's entry pays now
	}
	b.call(&wire.IpcImport{Kind: backend.IpcMemory, Key: make([]byte, IpcKeyLen)}, &h)
	if backend.Result(h.Result) != backend.ErrInvalidHandle {
		t.Fatalf("import of an unknown key: %d", h.Result)
	}
	b.call(&wire.IpcImport{Kind: backend.IpcMemory, Key: key.Key}, &h)
	q := h.Handle
	if h.Result != 0 {
		t.Fatalf("import: %d", h.Result)
	}
	var data wire.MemcpyDtoHData
	b.call(&wire.MemcpyDtoH{Src: q, Bytes: 6}, &data)
	if string(data.Data) != "shared" {
		t.Fatalf("importer read %q", data.Data)
	}
	b.call(&wire.MemFree{Ptr: q}, &st)
	if backend.Result(st.Result) != backend.ErrInvalidValue {
		t.Fatalf("free of imported memory: %d", st.Result)
	}
	b.call(&wire.IpcExport{Kind: backend.IpcMemory, Object: q}, &key)
	if key.Result == 0 {
		t.Fatal("imported memory exported again")
	}
	b.call(&wire.IpcClose{Ptr: q}, &st)
	a.call(&wire.MemFree{Ptr: p}, &st)
	if st.Result != 0 {
		t.Fatalf("exporter's free: %d", st.Result)
	}
	want := "export open close unlist"
	if got := joinOps(reg); got != want {
		t.Fatalf("registry told %q, want %q", got, want)
	}
	b.call(&wire.IpcClose{Ptr: q}, &st)
	if backend.Result(st.Result) != backend.ErrInvalidValue {
		t.Fatalf("second close: %d", st.Result)
	}
}

func joinOps(r *memRegistry) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.ops, " ")
}

// FuzzIpcSession: frames of IPC calls and of the calls that end exported or imported objects,
// served by a session with a registry (its own exports are what it may import), never crash the
// worker and the session ends when its client leaves.
func FuzzIpcSession(f *testing.F) {
	seed := func(msgs ...wire.Message) []byte {
		var b []byte
		for i, m := range msgs {
			b = wire.AppendFrame(b, m, 0, uint32(i+1))
		}
		return b
	}
	key := []byte{1, backend.IpcMemory}
	key = append(key, make([]byte, IpcKeyLen-2)...)
	f.Add(seed(&wire.MemAlloc{Bytes: 4096}, &wire.IpcExport{Kind: backend.IpcMemory, Object: 0x7f2c00000000},
		&wire.IpcImport{Kind: backend.IpcMemory, Key: key}, &wire.IpcClose{Ptr: 0x7f2c00001000},
		&wire.MemFree{Ptr: 0x7f2c00000000}))
	f.Add(seed(&wire.EventCreate{Flags: 6}, &wire.IpcExport{Kind: backend.IpcEvent, Object: 1},
		&wire.IpcImport{Kind: backend.IpcEvent, Key: key}, &wire.EventDestroy{Event: 1}))
	f.Add(seed(&wire.MemCreate{Size: 2 << 20, AllocType: 1, LocationType: 1, HandleTypes: 1},
		&wire.IpcExport{Kind: backend.IpcAllocation, Object: 1, HandleType: 1}, &wire.MemRelease{Handle: 1}))
	f.Add(seed(&wire.MemPoolCreate{AllocType: 1, HandleTypes: 1, LocationType: 1},
		&wire.MemAllocAsync{Bytes: 4096, Pool: 1}, &wire.IpcExport{Kind: backend.IpcPool, Object: 1, HandleType: 1},
		&wire.IpcExport{Kind: backend.IpcPoolPointer, Object: 0x7f2c00000000},
		&wire.MemPoolGetAccess{Pool: 1, LocationType: 1}, &wire.MemPoolSetAccess{Pool: 1, LocationType: 1, Flags: 3},
		&wire.MemFreeAsync{Ptr: 0x7f2c00000000}, &wire.MemPoolDestroy{Pool: 1}))
	f.Fuzz(func(t *testing.T, in []byte) {
		a, c := net.Pipe()
		s := NewSession(Config{Tier: "shared", MemoryQuota: 1 << 24, Devices: []int{0}}, sim.New(1, 1<<26), c,
			slog.New(slog.NewTextHandler(io.Discard, nil)))
		s.SetIpcRegistry(&memRegistry{entries: map[[IpcKeyLen]byte]memEntry{}})
		feedSession(t, s, a, in)
	})
}
