package store

import (
	"sync"
	"sync/atomic"
	"time"
)

// keyCache remembers recently resolved user API keys for keyTTL, saving the look-up (a query
// and a round trip, a third of an instance create's) on every request of a busy client.
//
// Every change that ends a credential's validity NOTIFYs credentialsChannel in its transaction,
// and each replica's listener (keylisten.go) forgets the whole cache on every notification, so a
// revocation reaches all replicas as soon as it commits. The cache serves only while live, that
// is while the listener is connected: a notification lost with the connection can never keep a
// revoked key alive. keyTTL stays as a backstop for changes made outside the store (plain SQL).
// Reads that started before a forget are never cached (gen). Unknown keys and daemon
// credentials are not cached.
type keyCache struct {
	live atomic.Bool // the listener is connected; read without the lock on every request
	mu   sync.Mutex
	gen  uint64
	m    map[[32]byte]cachedKey
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
	if !c.live.Load() {
		return Credential{}, 0, false // and put refuses while off
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	k, ok := c.m[hash]
	if !ok || time.Now().After(k.expires) {
		return Credential{}, c.gen, false
	}
	return k.cred, c.gen, true
}

// put caches cred unless the cache is off or was forgotten since gen was read.
func (c *keyCache) put(hash [32]byte, cred Credential, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.live.Load() || gen != c.gen {
		return
	}
	if c.m == nil || len(c.m) >= keyCacheMax {
		c.m = map[[32]byte]cachedKey{}
	}
	c.m[hash] = cachedKey{cred: cred, expires: time.Now().Add(keyTTL)}
}

// forget drops every cached key; called on each notification and by the revoking replica.
func (c *keyCache) forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.m = nil
}

// setLive turns the cache on (the listener is connected and LISTENing) or off, forgetting in
// both cases: what was read while notifications could be missed is not trusted.
func (c *keyCache) setLive(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++ // reads begun before the switch are not cached
	c.m = nil
	c.live.Store(on)
}
