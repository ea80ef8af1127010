package worker

import (
	"context"
	"encoding/binary"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"gpucloud/gpuserverd/backend/sim"
	"gpucloud/gpuserverd/ivshmem"
	"gpucloud/gpuserverd/wire"
)

// channelSession serves a session on a claimed channel file as a worker process does, and
// returns the guest's side of the rings, the session and the channel.
func channelSession(t *testing.T, timeout time.Duration) (*client, *Session, *ivshmem.Channel) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gpucloud-i1")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	os.Truncate(path, wire.ShmMin)
	ch, err := ivshmem.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	ch.Reset()
	setState(ch, ivshmem.StateClaimed) // as the guest library's claim does
	s := NewSession(Config{Backend: "simulated", SessionID: "s-iv", Tier: "shared", Devices: []int{0}},
		sim.New(1, 1<<30), newIvshmemConn(ch, timeout), slog.Default())
	if err := s.adoptIvshmem(ch); err != nil {
		t.Fatal(err)
	}
	c := &client{t: t, conn: ringConn{r: newShmRing(ch.Mem, 1, nil), w: newShmRing(ch.Mem, 0, nil)}, done: make(chan error, 1)}
	go func() { c.done <- s.Serve(context.Background()) }()
	var hello wire.HelloReply
	c.read(&hello)
	if hello.Result != 0 || hello.SessionID != "s-iv" {
		t.Fatalf("hello %+v", hello)
	}
	return c, s, ch
}

func setState(ch *ivshmem.Channel, st uint32) {
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&ch.Mem[ivshmem.HeaderOff+12])), st)
}

// The region is the session's arena, registered while it runs; a guest that lets the channel go
// ends the session, which unregisters it.
func TestIvshmemSessionReleased(t *testing.T) {
	c, s, ch := channelSession(t, time.Minute)
	var st wire.Status
	c.call(&wire.Synchronize{}, &st)
	sc := s.devs[0].ctx.(*sim.Context)
	if n := sc.Registered(); n != 1 || s.shm == nil || len(s.shm.mem) != wire.ShmMin {
		t.Fatalf("%d ranges registered, arena %v", n, s.shm != nil)
	}
	// An arena copy names a range of the region, as over a memfd arena.
	var alloc wire.HandleReply
	c.call(&wire.MemAlloc{Bytes: 4096}, &alloc)
	binary.LittleEndian.PutUint32(ch.Mem[wire.ShmCtl:], 0xfeedbeef)
	c.call(&wire.MemcpyHtoDShm{Dst: alloc.Handle, Offset: wire.ShmCtl, Bytes: 4}, &st)
	c.call(&wire.MemcpyDtoHShm{Src: alloc.Handle, Offset: wire.ShmCtl + 8, Bytes: 4}, &st)
	if st.Result != 0 || binary.LittleEndian.Uint32(ch.Mem[wire.ShmCtl+8:]) != 0xfeedbeef {
		t.Fatalf("arena copies: %+v", st)
	}
	setState(ch, ivshmem.StateClosed)
	select {
	case err := <-c.done:
		if err != nil {
			t.Fatalf("session end: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the session outlived its guest's release")
	}
	if n := sc.Registered(); n != 0 {
		t.Fatalf("%d ranges registered after the end", n)
	}
}

// A guest whose heartbeat stands still (killed, or its VM stopped) loses its session after the
// timeout; one that beats keeps it.
func TestIvshmemSessionGuestSilent(t *testing.T) {
	c, _, ch := channelSession(t, 300*time.Millisecond)
	beat := (*uint64)(unsafe.Pointer(&ch.Mem[ivshmem.HeaderOff+128]))
	var last time.Time
	for range 8 { // 800 ms of beats: alive
		atomic.AddUint64(beat, 1)
		last = time.Now()
		time.Sleep(100 * time.Millisecond)
	}
	var st wire.Status
	c.call(&wire.Synchronize{}, &st)
	select {
	case err := <-c.done:
		if err != nil {
			t.Fatalf("session end: %v", err)
		}
		if d := time.Since(last); d < 300*time.Millisecond {
			t.Fatalf("ended %v after the last beat, before the timeout", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the session outlived its silent guest")
	}
}

// A worker serves the slot it was given, registering that slot alone; a slot whose header names
// another slot (the guest can write it) is refused by name, nothing registered.
func TestIvshmemSlotSession(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpucloud-i1")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	os.Truncate(path, 2*wire.ShmMin)
	whole, err := ivshmem.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer whole.Close()
	for _, sl := range whole.Slots(2) {
		sl.Reset()
		setState(sl, ivshmem.StateClaimed)
	}
	for _, tc := range []struct {
		index   int
		forged  bool
		wantErr string
	}{{1, false, ""}, {1, true, "slot header says slot 0 of 2, the worker was given 1 of 2"}} {
		f, _ := os.OpenFile(path, os.O_RDWR, 0)
		ch, err := ivshmem.AdoptSlot(f, tc.index, 2)
		if err != nil {
			t.Fatal(err)
		}
		if tc.forged {
			binary.LittleEndian.PutUint32(ch.Mem[ivshmem.HeaderOff+32:], 0)
		}
		b := sim.New(1, 1<<30)
		s := NewSession(Config{Backend: "simulated", SessionID: "s-slot", Tier: "shared", Devices: []int{0}},
			b, newIvshmemConn(ch, time.Minute), slog.Default())
		err = s.adoptIvshmem(ch)
		switch {
		case tc.wantErr == "" && (err != nil || len(s.shm.mem) != wire.ShmMin || s.devs[0].ctx.(*sim.Context).Registered() != 1):
			t.Fatalf("slot %d: %v", tc.index, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr) || s.shm != nil):
			t.Fatalf("forged slot header: %v", err)
		}
		s.close()
		ch.Close()
	}
}
