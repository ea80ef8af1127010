package server

import (
	"bytes"
	"testing"
)

// An id is found only under the instance that filed it, goes with the worker that filed it, and
// an instance cannot file the same id twice or more than its share.
func TestNcclIDsScopedToInstance(t *testing.T) {
	r := newNcclIDs()
	a, b := r.newOwner(), r.newOwner()
	id := [16]byte{1, 2, 3}
	if !r.register(a, "inst-1", id, []byte("nccl-id")) {
		t.Fatal("first registration refused")
	}
	if r.register(b, "inst-1", id, []byte("other")) {
		t.Fatal("the same id filed twice for one instance")
	}
	if got, ok := r.lookup("inst-1", id); !ok || !bytes.Equal(got, []byte("nccl-id")) {
		t.Fatalf("same instance: %q %v", got, ok)
	}
	if _, ok := r.lookup("inst-2", id); ok {
		t.Fatal("another instance found the id")
	}
	r.drop(b) // another worker's end leaves it
	if _, ok := r.lookup("inst-1", id); !ok {
		t.Fatal("id dropped with a worker that did not file it")
	}
	r.drop(a)
	if _, ok := r.lookup("inst-1", id); ok || r.perInst["inst-1"] != 0 {
		t.Fatalf("id outlived its worker (count %d)", r.perInst["inst-1"])
	}
	for i := range maxNcclIDsPerInstance {
		if !r.register(a, "inst-3", [16]byte{byte(i), byte(i >> 8), 9}, []byte{1}) {
			t.Fatalf("registration %d refused", i)
		}
	}
	if r.register(a, "inst-3", [16]byte{0xff, 0xff, 0xff}, []byte{1}) {
		t.Fatal("an instance filed more than its share")
	}
	if !r.register(a, "inst-4", id, []byte{1}) {
		t.Fatal("one instance's share limited another's")
	}
}
