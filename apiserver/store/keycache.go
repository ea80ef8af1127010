package store

import (
	"sync"
	"time"
)

// keyCache remembers recently resolved user API keys for keyTTL, saving the look-up (a query
// and a round trip, a third of an instance create's) on every request of a busy client.
//
// The price is that a revocation takes up to keyTTL to reach the other apiserver replicas; this
// one forgets every key at once when it revokes one, and never caches what it read before such
// a revocation committed (gen). Unknown keys and daemon credentials are not cached.
type keyCache struct {
	mu  sync.Mutex
	gen uint64
	m   map[[32]byte]cachedKey
}

type cachedKey struct {
	cred    Credential
	expires time.Time
}

const (
	keyTTL      = 2 * time.Second
	keyCacheMax = 10_000 // keys; past it the cache starts over
)

func (c *keyCache) get(hash [32]byte) (Credential, uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k, ok := c.m[hash]
	if !ok || time.Now().After(k.expires) {
		return Credential{}, c.gen, false
	}
	return k.cred, c.gen, true
}

// put caches cred unless a revocation happened since gen was read.
func (c *keyCache) put(hash [32]byte, cred Credential, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	if c.m == nil || len(c.m) >= keyCacheMax {
		c.m = map[[32]byte]cachedKey{}
	}
	c.m[hash] = cachedKey{cred: cred, expires: time.Now().Add(keyTTL)}
}

// forget drops every cached key; called once a revocation has committed.
func (c *keyCache) forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.m = nil
}
