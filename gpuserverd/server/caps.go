package server

import (
	"fmt"
)

// Every admitted session is a worker process with its own contexts, so how many there are is
// bounded per instance (a VM's processes, however many tokens it holds) and per server (issue
// 13, finding 4). The caps are checked with the tiers, before any worker starts.

// Defaults of the session caps: a VM's processes rarely need more than a few sessions at once
// (its ivshmem channel has at most 4 slots by default); a worker costs tens of MB of host
// memory before any GPU work.
const (
	DefaultMaxSessions            = 256
	DefaultMaxSessionsPerInstance = 16
)

// admitted counts admitted sessions, in all and by instance; guarded by Server.mu.
type admitted struct {
	total      int
	byInstance map[string]int
}

// check refuses one more session of instance past either cap.
func (a *admitted) check(instance string, max, perInstance int) error {
	if a.total >= max {
		return &refusal{errDeviceUnavailable, "session_cap",
			fmt.Sprintf("this GPU server already runs %d sessions, its limit (--max-sessions); try again later", max)}
	}
	if n := a.byInstance[instance]; n >= perInstance {
		return &refusal{errDeviceUnavailable, "session_cap",
			fmt.Sprintf("instance %s already has %d sessions on this GPU server, its limit (--max-sessions-per-instance); end one first", instance, n)}
	}
	return nil
}

func (a *admitted) add(instance string, n int) {
	a.total += n
	if a.byInstance[instance] += n; a.byInstance[instance] <= 0 {
		delete(a.byInstance, instance)
	}
}
