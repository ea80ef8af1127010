package guesttest

import (
	"fmt"
	"strings"
	"testing"

	"gpucloud/internal/sessiontoken"
)

// sharedToken is a shared-tier session of inst on GPU 0 with a 1 GiB quota: sessions of
// several instances share the GPU.
func sharedToken(s *gpuserverd, inst, session string) string {
	return s.token(session, sessiontoken.TierShared, 1<<30, func(c *sessiontoken.Claims) {
		c.InstanceID, c.TenantID = inst, "tenant-"+inst
	})
}

// TestIpcBetweenProcessesOfOneInstance: ipc_test (tests/ipc_test.c) exports device memory and an
// interprocess event, a cuMemCreate allocation's POSIX file descriptor, and a pool with one of
// its allocations, then forks and execs a child whose session is another of the same instance:
// the child opens each, reads the parent's bytes and writes its own, which the parent then reads
// (the legacy case ordered by the shared event behind a slow kernel). With a child of another
// instance, every open is refused with CUDA_ERROR_INVALID_HANDLE and the parent's memory is as
// it left it.
func TestIpcBetweenProcessesOfOneInstance(t *testing.T) {
	s := startServer(t)
	for _, mode := range []string{"legacy", "vmm", "pool"} {
		for _, foreign := range []bool{false, true} {
			peerInst := "inst-ipc"
			if foreign {
				peerInst = "inst-other"
			}
			parent := sharedToken(s, "inst-ipc", fmt.Sprintf("s-%s-%v-parent", mode, foreign))
			peer := sharedToken(s, peerInst, fmt.Sprintf("s-%s-%v-child", mode, foreign))
			args := []string{mode}
			if foreign {
				args = append(args, "foreign")
			}
			cmd := s.client(parent, "ipc_test", args...)
			cmd.Env = append(cmd.Env, "IPC_PEER_TOKEN="+peer)
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "ipc_test: OK") ||
				!strings.Contains(string(out), "ipc_test child ("+mode) {
				t.Fatalf("%s (foreign %v): %v\n%s", mode, foreign, err, out)
			}
		}
	}
}
