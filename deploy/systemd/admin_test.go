package systemd

import (
	"os"
	"strings"
	"testing"
)

// TestGPUServerdAdminOnLocalhost: the shipped gpuserverd settings keep its admin port (every
// tenant's usage) off the addresses VMs dial (issue 13, finding 7).
func TestGPUServerdAdminOnLocalhost(t *testing.T) {
	raw, err := os.ReadFile("gpuserverd.env")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "GPUSERVERD_ADMIN="); ok &&
			!strings.HasPrefix(v, "127.0.0.1:") && !strings.HasPrefix(v, "[::1]:") {
			t.Fatalf("gpuserverd.env binds the admin port on %s; want 127.0.0.1 or [::1]", v)
		}
	}
}
