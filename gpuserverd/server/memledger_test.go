package server

import "testing"

// The ledger holds an instance's sessions together to its quota, never gives back more than a
// session held, and drops a dead worker's share.
func TestMemoryLedger(t *testing.T) {
	l := newMemoryLedger()
	k := memKey{"inst", "GPU-0"}
	if ok, used := l.change(1, k, 10, 6); !ok || used != 6 {
		t.Fatalf("first 6 of 10: %v %d", ok, used)
	}
	if ok, used := l.change(2, k, 10, 5); ok || used != 6 {
		t.Fatalf("another session's 5 past the instance's 10: %v %d", ok, used)
	}
	if ok, used := l.change(2, k, 10, 4); !ok || used != 10 {
		t.Fatalf("another session's 4, exactly the rest: %v %d", ok, used)
	}
	if _, used := l.change(2, k, 10, -100); used != 6 {
		t.Fatalf("a give-back past what the session held: instance holds %d, want 6", used)
	}
	if ok, _ := l.change(3, memKey{"other", "GPU-0"}, 10, 10); !ok {
		t.Fatal("another instance's quota is its own")
	}
	l.drop(1)
	if n := l.instanceBytes("inst", "GPU-0"); n != 0 {
		t.Fatalf("after the worker's death the instance holds %d", n)
	}
	if ok, _ := l.change(4, k, 10, 1<<62); ok {
		t.Fatal("a reservation past any quota fitted")
	}
}
