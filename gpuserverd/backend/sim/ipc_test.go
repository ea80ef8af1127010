package sim

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"gpucloud/gpuserverd/backend"
)

// Two contexts of two simulated backends stand for two worker processes: what one exports the
// other opens through the memfd alone, as a worker in another process does.

func TestIpcMemoryIsSharedBothWays(t *testing.T) {
	_, a := newCtx(t, 1<<30)
	_, b := newCtx(t, 1<<30)
	p, _ := a.MemAlloc(4096)
	a.MemcpyHtoD(p, []byte("from the exporter"), 0, false)
	blob, f, err := a.(backend.IPC).IpcExport(backend.IpcMemory, p, 0)
	if err != nil {
		t.Fatal(err)
	}
	q, err := b.(backend.IPC).IpcImport(backend.IpcMemory, blob, f, 0, 1)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 17)
	b.MemcpyDtoH(got, q, 0, false)
	if string(got) != "from the exporter" {
		t.Fatalf("importer read %q", got)
	}
	b.MemcpyHtoD(q, []byte("from the importer"), 0, false)
	a.MemcpyDtoH(got, p, 0, false)
	if string(got) != "from the importer" {
		t.Fatalf("exporter read %q", got)
	}
	if err := b.MemFree(q); err == nil {
		t.Fatal("cuMemFree of imported memory succeeded")
	}
	if err := b.(backend.IPC).IpcCloseMemory(q); err != nil {
		t.Fatal(err)
	}
	if err := b.MemcpyDtoH(got, q, 0, false); err == nil {
		t.Fatal("imported memory readable after close")
	}
}

func TestIpcEventOrdersTwoContexts(t *testing.T) {
	_, a := newCtx(t, 1<<30)
	_, b := newCtx(t, 1<<30)
	if _, err := a.EventCreate(0x4); !errors.Is(err, backend.ErrInvalidValue) {
		t.Fatalf("interprocess event with timing: %v", err)
	}
	ev, _ := a.EventCreate(0x6)
	blob, f, err := a.(backend.IPC).IpcExport(backend.IpcEvent, uint64(ev), 0)
	if err != nil {
		t.Fatal(err)
	}
	ev2, err := b.(backend.IPC).IpcImport(backend.IpcEvent, blob, f, 0, 0)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	s, _ := a.StreamCreate(1)
	// A stream of a held by a spin kernel stand-in: a wait on b's event that is not yet recorded.
	gate := make(chan struct{})
	a.(*Context).enqueue(s, a.(*Context).streams[s], func() { <-gate })
	a.EventRecord(ev, s)
	if b.EventQuery(backend.Handle(ev2)) != backend.ErrNotReady {
		t.Fatal("the importer sees the exporter's pending record as complete")
	}
	close(gate)
	if err := b.EventSynchronize(backend.Handle(ev2)); err != nil {
		t.Fatal(err)
	}
	if err := b.EventQuery(backend.Handle(ev2)); err != nil {
		t.Fatal(err)
	}
}

func TestIpcAllocationNeedsTheHandleType(t *testing.T) {
	_, a := newCtx(t, 1<<30)
	_, b := newCtx(t, 1<<30)
	vm := a.(backend.VirtualMemory)
	plain, _ := vm.MemCreate(backend.AllocProps{Type: 1, LocationType: 1, Size: granularity}, 0)
	if _, _, err := a.(backend.IPC).IpcExport(backend.IpcAllocation, uint64(plain), 1); !errors.Is(err, backend.ErrInvalidValue) {
		t.Fatalf("export of an allocation made without the handle type: %v", err)
	}
	h, _ := vm.MemCreate(backend.AllocProps{Type: 1, LocationType: 1, HandleTypes: 1, Size: granularity}, 0)
	blob, f, err := a.(backend.IPC).IpcExport(backend.IpcAllocation, uint64(h), 1)
	if err != nil {
		t.Fatal(err)
	}
	h2, err := b.(backend.IPC).IpcImport(backend.IpcAllocation, blob, f, 0, 0)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, side := range []struct {
		c backend.Context
		h backend.Handle
	}{{a, h}, {b, backend.Handle(h2)}} {
		v := side.c.(backend.VirtualMemory)
		p, _ := v.MemAddressReserve(granularity, 0, 0, 0)
		if err := v.MemMap(p, granularity, 0, side.h, 0); err != nil {
			t.Fatal(err)
		}
		v.MemSetAccess(p, granularity, 1, 0, 3)
		if side.c == a {
			a.Memset(p, 0xab, 1, granularity, 0, false)
			continue
		}
		got := make([]byte, 8)
		side.c.MemcpyDtoH(got, p+100, 0, false)
		if !bytes.Equal(got, bytes.Repeat([]byte{0xab}, 8)) {
			t.Fatalf("the importer's mapping reads %x", got)
		}
	}
	if _, err := b.(backend.IPC).IpcImport(backend.IpcAllocation, []byte("random bytes"), nil, 0, 0); !errors.Is(err, backend.ErrInvalidHandle) {
		t.Fatalf("import of random bytes: %v", err)
	}
}

// A stream waiting on another process's record that never completes (that process ended) does
// not keep the context from closing.
func TestIpcEventWaitEndsWithTheContext(t *testing.T) {
	_, a := newCtx(t, 1<<30)
	_, b := newCtx(t, 1<<30)
	ev, _ := a.EventCreate(0x6)
	blob, f, _ := a.(backend.IPC).IpcExport(backend.IpcEvent, uint64(ev), 0)
	ev2, err := b.(backend.IPC).IpcImport(backend.IpcEvent, blob, f, 0, 0)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	s, _ := a.StreamCreate(1)
	gate := make(chan struct{})
	defer close(gate)
	a.(*Context).enqueue(s, a.(*Context).streams[s], func() { <-gate })
	a.EventRecord(ev, s) // issued, held behind the gate: never completes while the test runs
	bs, _ := b.StreamCreate(1)
	if err := b.StreamWaitEvent(bs, backend.Handle(ev2)); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- b.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the importer's context did not close behind a wait on the exporter's record")
	}
}
