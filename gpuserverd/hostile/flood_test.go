package hostile

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gpucloud/gpuserverd/wire"
	"gpucloud/internal/sessiontoken"
)

// TestHandshakeFloodBoundedMemory is issue 13's finding 1: connections that claim the largest
// frame for their Hello and send megabytes of it must not make gpuserverd hold that memory, and
// trickling connections must not hold more than the per-source limit of handshakes, while a
// legitimate client from another address is served throughout. The bound is measured on the
// server process's resident set.
func TestHandshakeFloodBoundedMemory(t *testing.T) {
	s := start(t)
	base := s.rss()
	const floods, sent = 40, 8 << 20
	var wg sync.WaitGroup
	var held []net.Conn
	var mu sync.Mutex
	for range floods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: 5 * time.Second}
			c, err := d.Dial("tcp", s.addr)
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
			c.SetWriteDeadline(time.Now().Add(5 * time.Second))
			// A Hello claiming the largest frame, then 8 MiB of it; the connection is then held.
			c.Write(wire.AppendHeader(nil, wire.TypeHello, 0, 1, wire.MaxFrame))
			zeros := make([]byte, 1<<20)
			for i := 0; i < sent>>20; i++ {
				if _, err := c.Write(zeros); err != nil {
					return
				}
			}
		}()
	}
	// Meanwhile a tenant with a good token is served, from its own address.
	c, r := s.hello(s.token("legit", sessiontoken.TierShared, 64<<20))
	if r.Result != 0 {
		t.Fatalf("legitimate Hello during the flood: %d %q", r.Result, r.Message)
	}
	if res := c.alloc(1 << 20); res != 0 {
		t.Fatalf("legitimate allocation during the flood: %d", res)
	}
	wg.Wait()
	peak := s.rss()
	for range 10 { // the server may still be reading what the flood sent
		time.Sleep(50 * time.Millisecond)
		peak = max(peak, s.rss())
	}
	for _, c := range held {
		c.Close()
	}
	t.Logf("gpuserverd RSS %d MiB before, %d MiB at the flood's peak (%d connections each sending %d MiB of a %d-byte Hello)",
		base>>20, peak>>20, floods, sent>>20, wire.MaxFrame)
	if grown := int64(peak) - int64(base); grown > 48<<20 {
		t.Fatalf("gpuserverd grew by %d MiB under an unauthenticated flood; the bound is 48 MiB", grown>>20)
	}
}

// TestHandshakePerSourceLimit: trickling connections from one address hold at most the
// per-source limit of handshakes; the rest are closed at once, and another address is served.
func TestHandshakePerSourceLimit(t *testing.T) {
	const limit, conns = 8, 40
	s := start(t, "--max-pending-handshakes-per-source", "8")
	var closedFast atomic.Int32
	var wg sync.WaitGroup
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.3")}, Timeout: 5 * time.Second}
			c, err := d.Dial("tcp", s.addr)
			if err != nil {
				closedFast.Add(1)
				return
			}
			defer c.Close()
			// A plausible Hello header, then one byte at a time.
			c.Write(wire.AppendHeader(nil, wire.TypeHello, 0, 1, 4000))
			c.SetReadDeadline(time.Now().Add(2 * time.Second))
			one := make([]byte, 1)
			for {
				c.Write([]byte{0})
				if _, err := c.Read(one); err != nil {
					if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
						closedFast.Add(1) // closed by the server within the 2 s
					}
					return
				}
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	c, r := s.hello(s.token("legit", sessiontoken.TierShared, 1<<20))
	if r.Result != 0 {
		t.Fatalf("another address's Hello while one address trickles: %d %q", r.Result, r.Message)
	}
	c.conn.Close()
	wg.Wait()
	if n := closedFast.Load(); n < conns-limit {
		t.Fatalf("%d of %d trickling connections from one address were closed at once; want at least %d (limit %d)", n, conns, conns-limit, limit)
	}
	code, body := s.get("/metrics", s.adminAuth())
	if code != 200 || !containsMetricAtLeast(body, "gpuserverd_handshakes_shed_total", conns-limit) {
		t.Fatalf("metrics: %d\n%s", code, body)
	}
}
