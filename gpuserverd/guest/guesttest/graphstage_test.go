package guesttest

import (
	"strings"
	"testing"

	"gpucloud/internal/sessiontoken"
)

// TestGraphStages runs host nodes (by hand and captured from cuLaunchHostFunc), graph clones and
// an executable graph's node updates through the guest library against gpuserverd on the
// simulated backend, over TCP and over shared memory (tests/graphstage_test.c): a host node sees a
// kernel's result copied before it, and what it writes reaches the device through a copy after
// it; a clone gives the same result; new kernel arguments change the result.
func TestGraphStages(t *testing.T) {
	s := startServer(t)
	want := []string{"host node ok", "clone ok", "exec node params ok", "exec update ok", "plain exec params ok",
		"captured host function ok", "host function ok", "graphstage_test: OK"}
	check := func(how, out string) {
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: missing %q in:\n%s", how, w, tail(out))
			}
		}
	}
	check("TCP", s.run(s.token("s-graphstage-tcp", sessiontoken.TierShared, 1<<30), "graphstage_test"))
	check("shared memory", s.shmRun(t, s.token("s-graphstage-shm", sessiontoken.TierShared, 1<<30), "16", "graphstage_test"))
}
