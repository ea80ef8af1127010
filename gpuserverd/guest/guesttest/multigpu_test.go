package guesttest

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"gpucloud/gpuserverd/backend/sim"
	"gpucloud/internal/sessiontoken"
)

// multiGPUToken grants the simulated GPUs in order (backend ordinals), on a server of four.
func multiGPUToken(s *gpuserverd, session string, order ...int) string {
	return s.token(session, sessiontoken.TierDedicated, 0, func(c *sessiontoken.Claims) {
		c.GPUs = nil
		for _, o := range order {
			c.GPUs = append(c.GPUs, sim.UUID(o))
		}
	})
}

// simPCI is the simulated backend's PCI bus id of backend ordinal o.
func simPCI(o int) string { return fmt.Sprintf("00000000:%02x:00.0", 0x10+o) }

// TestPeerAccessAndCopies: a session granted 2 and 4 of a server's simulated GPUs, in an order
// other than the server's, sees them in the order granted; peer queries, peer access and copies
// between every pair run on the server.
func TestPeerAccessAndCopies(t *testing.T) {
	for _, order := range [][]int{{3, 1}, {2, 0, 3, 1}} {
		s := startServer(t, "GPUSERVERD_SIM_DEVICES=4") // a dedicated GPU stays taken until a session's end is seen
		args := []string{strconv.Itoa(len(order))}
		for _, o := range order {
			args = append(args, simPCI(o))
		}
		out := s.run(multiGPUToken(s, fmt.Sprintf("s-peer-%d", len(order)), order...), "peer_test", args...)
		if !strings.Contains(out, "peer_test: OK") {
			t.Fatalf("%v:\n%s", order, out)
		}
	}
}
