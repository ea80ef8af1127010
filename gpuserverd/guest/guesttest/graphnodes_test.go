package guesttest

import (
	"strings"
	"testing"

	"gpucloud/internal/sessiontoken"
)

// TestGraphNodes runs conditional nodes (IF/ELSE, SWITCH, WHILE built by hand and by capture into
// a graph) and graph memory nodes through the guest library on the shared tier with a 64 MiB
// quota, which graph memory must not get past (tests/graphnodes_test.c).
func TestGraphNodes(t *testing.T) {
	s := startServer(t)
	tok := s.token("s-graphnodes", sessiontoken.TierShared, 64<<20)
	out := s.run(tok, "graphnodes_test", "64")
	for _, want := range []string{"if/else ok", "if and switch ok", "do-while ok", "captured while ok",
		"memory nodes ok", "captured allocation ok", "graph memory quota ok", "graphnodes_test: OK"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}
