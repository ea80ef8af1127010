package worker

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"gpucloud/gpuserverd/backend"
)

// An arena over the session's limit or the server's total is refused as out of memory with the
// size the guest may ask for instead; the session goes on and can take that size. The server's
// side is a stand-in here (a closure keeping the books); guesttest runs the real one.
func TestShmOpenLimits(t *testing.T) {
	const mib = 1 << 20
	var asked []uint64
	avail, held := uint64(40*mib), uint64(0)
	var fail error
	budget := func(n uint64) (bool, uint64, error) {
		asked = append(asked, n)
		if fail != nil {
			return false, 0, fail
		}
		room := avail + held
		if n > room {
			return false, room, nil
		}
		avail, held = room-n, n
		return true, room, nil
	}
	c, uc, _ := unixSession(t, func(s *Session) {
		s.cfg.ShmMax = 32 * mib
		s.SetArenaBudget(budget)
	})
	refused := func(bytes uint64, offer uint64, msg string) {
		t.Helper()
		r, mem := openArena(t, c, uc, bytes)
		if backend.Result(r.Result) != backend.ErrOutOfMemory || mem != nil || r.Bytes != offer || !strings.Contains(r.Message, msg) {
			t.Fatalf("ShmOpen %d: %+v, want out of memory offering %d, %q", bytes, r, offer, msg)
		}
	}
	// Over the session's limit: the server is not asked.
	refused(64*mib, 32*mib, "over this server's arena limit per session, 33554432")
	if len(asked) != 0 {
		t.Fatalf("server asked %v for an arena over the session's limit", asked)
	}
	// The server cannot reach it: refused, and nothing held.
	fail = errors.New("socket gone")
	refused(32*mib, 0, "socket gone")
	fail = nil
	// Over what the server has left (40 MiB, 32 asked) is fine; then fewer left than asked.
	avail = 20 * mib
	refused(32*mib, 20*mib, "may hold only 20971520 more")
	avail = 20*mib + 4096 // not whole MiB: the offer is
	refused(32*mib, 20*mib, "may hold only")
	avail = 15 * mib // below the smallest arena: no offer
	refused(16*mib, 0, "may hold only 15728640 more")
	avail = 20 * mib
	r, mem := openArena(t, c, uc, 20*mib)
	if r.Result != 0 || len(mem) != 20*mib || held != 20*mib {
		t.Fatalf("ShmOpen of the offered size: %+v, held %d", r, held)
	}
	if want := []uint64{32 * mib, 32 * mib, 32 * mib, 16 * mib, 20 * mib}; !equalU64(asked, want) {
		t.Fatalf("server asked %v, want %v", asked, want)
	}
}

func equalU64(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestArenaMessages(t *testing.T) {
	if n, err := DecodeArenaRequest([]byte{1, 2, 0, 0, 0, 0, 0, 0}); err != nil || n != 0x201 {
		t.Fatalf("request: %d %v", n, err)
	}
	if _, err := DecodeArenaRequest(make([]byte, 9)); err == nil || !strings.Contains(err.Error(), "9 bytes, want 8") {
		t.Fatalf("long request: %v", err)
	}
	ok, avail, err := decodeArenaReply(EncodeArenaReply(true, 5<<30))
	if err != nil || !ok || avail != 5<<30 {
		t.Fatalf("reply: %v %d %v", ok, avail, err)
	}
	if _, _, err := decodeArenaReply([]byte{2, 0, 0, 0, 0, 0, 0, 0, 0}); err == nil {
		t.Fatal("reply with flag 2 accepted")
	}
}

// FuzzArenaMessages: any bytes either decode to a value that encodes back to the same bytes, or
// are refused; nothing panics.
func FuzzArenaMessages(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 1})
	f.Add([]byte{1, 0, 0, 16, 0, 0, 0, 0, 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		if n, err := DecodeArenaRequest(b); err == nil {
			if len(b) != 8 || n>>56 != uint64(b[7]) {
				t.Fatalf("request %x decoded to %d", b, n)
			}
		}
		if ok, avail, err := decodeArenaReply(b); err == nil {
			if !bytes.Equal(EncodeArenaReply(ok, avail), b) {
				t.Fatalf("reply %x decoded to %v %d", b, ok, avail)
			}
		}
	})
}

// An arena the server made room for but the worker could not make gives the room back.
func TestShmOpenFailedGivesBack(t *testing.T) {
	var asked []uint64
	c, uc, _ := unixSession(t, func(s *Session) {
		s.cfg.Devices = []int{7} // the backend has no device 7: no context, no arena
		s.SetArenaBudget(func(n uint64) (bool, uint64, error) {
			asked = append(asked, n)
			return true, 64 << 20, nil
		})
	})
	r, mem := openArena(t, c, uc, 16<<20)
	if r.Result == 0 || mem != nil || !strings.Contains(r.Message, "no device") {
		t.Fatalf("ShmOpen without a device: %+v", r)
	}
	if !equalU64(asked, []uint64{16 << 20, 0}) {
		t.Fatalf("server asked %v, want the room taken and given back", asked)
	}
}
