package guesttest

import (
	"strings"
	"testing"

	"gpucloud/internal/sessiontoken"
)

// TestDriverFamilies runs the hand-written driver-API families (virtual memory, memory pools,
// arrays and 3-D copies, textures, graphs and capture, launches with attributes) through the
// guest library over a session with a 64 MiB quota, which the test drives past on purpose.
func TestDriverFamilies(t *testing.T) {
	s := startServer(t)
	tok := s.token("s-families", sessiontoken.TierShared, 64<<20)
	out := s.run(tok, "families_test", "64")
	for _, want := range []string{"vmm ok", "vmm without a context ok", "pools ok", "arrays ok", "textures ok", "graphs ok", "launches ok", "pointers ok", "memops ok", "tensormaps ok", "linking ok", "families_test: OK"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}
