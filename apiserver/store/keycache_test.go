package store

import (
	"testing"

	"github.com/google/uuid"
)

// The cache serves only while live, and never keeps what was read before a forget or a switch.
func TestKeyCacheLiveAndGenerations(t *testing.T) {
	var c keyCache
	h := [32]byte{1}
	cred := Credential{KeyID: uuid.New()}

	_, gen, _ := c.get(h)
	c.put(h, cred, gen)
	if _, _, ok := c.get(h); ok || len(c.m) != 0 {
		t.Fatal("cached before the listener was connected")
	}

	c.setLive(true)
	_, gen, _ = c.get(h)
	c.put(h, cred, gen)
	if got, _, ok := c.get(h); !ok || got.KeyID != cred.KeyID {
		t.Fatalf("live cache: got %v %v, want the key", got, ok)
	}

	// A read that began before a notification is not cached after it.
	_, gen, _ = c.get([32]byte{2})
	c.forget()
	if _, _, ok := c.get(h); ok {
		t.Fatal("key served after forget")
	}
	c.put([32]byte{2}, cred, gen)
	if _, _, ok := c.get([32]byte{2}); ok {
		t.Fatal("a read from before the forget was cached")
	}

	// Connection lost: everything forgotten, a read begun before it not cached, nothing served.
	_, gen, _ = c.get(h)
	c.setLive(false)
	c.put(h, cred, gen)
	if _, _, ok := c.get(h); ok || len(c.m) != 0 {
		t.Fatal("served or cached with the listener down")
	}
	// Reconnected: a read begun while down is not cached either.
	c.setLive(true)
	c.put(h, cred, gen)
	if _, _, ok := c.get(h); ok {
		t.Fatal("a read from while the listener was down was cached after it reconnected")
	}
}

// The fast path with the cache live: a hit is an atomic load plus the mutex, as before.
func BenchmarkKeyCacheHit(b *testing.B) {
	var c keyCache
	c.setLive(true)
	h := [32]byte{1}
	_, gen, _ := c.get(h)
	c.put(h, Credential{}, gen)
	for b.Loop() {
		if _, _, ok := c.get(h); !ok {
			b.Fatal("miss")
		}
	}
}
