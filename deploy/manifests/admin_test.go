package manifests

import (
	"strings"
	"testing"
)

// TestGPUServerdAdminOnLocalhost: the shipped agents' settings keep gpuserverd's admin port
// (every tenant's usage) off the node address VMs dial (issue 13, finding 7).
func TestGPUServerdAdminOnLocalhost(t *testing.T) {
	found := false
	for _, o := range loadAll(t) {
		if o.Kind != "ConfigMap" {
			continue
		}
		if v, ok := o.Data["GPUSERVERD_ADMIN"]; ok {
			found = true
			if !strings.HasPrefix(v, "127.0.0.1:") && !strings.HasPrefix(v, "[::1]:") {
				t.Errorf("%s: GPUSERVERD_ADMIN %s; want 127.0.0.1 or [::1]", o.file, v)
			}
		}
	}
	if !found {
		t.Fatal("no ConfigMap sets GPUSERVERD_ADMIN: gpuserverd's default, 127.0.0.1:7071, then applies; say so explicitly")
	}
}
