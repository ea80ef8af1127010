package cli_test

import (
	"context"
	"strings"
	"testing"

	"gpucloud/cmd/gpuctl/cli"
	"gpucloud/sdk"
)

// An instance whose host and GPU server went silent is marked in the table of list and get, is
// selected by --condition, and carries its conditions in JSON and YAML.
func TestInstanceConditionsInGpuctl(t *testing.T) {
	h := newHarness(t)
	h.e.Host(t, "h1", 32)
	h.e.GPUServer(t, "g1", 1)
	a := h.e.A.AdminKey
	var inst sdk.Instance
	h.jsonOf(&inst, a, "instances", "create", "vm1", "--type", h.e.Dedicated, "--image", "ubuntu-24.04")
	if out := h.ok(a, "instances", "list"); !strings.Contains(out, "WARNINGS") || strings.Contains(out, "Reachable") {
		t.Fatalf("healthy list:\n%s", out)
	}
	if n, err := h.e.Store.MarkUnreachable(context.Background(), 0); err != nil || n != 2 {
		t.Fatalf("mark unreachable: %d %v", n, err)
	}
	for _, args := range [][]string{{"instances", "list"}, {"instances", "get", inst.ID}} {
		out := h.ok(a, args...)
		if !strings.Contains(out, "HostReachable=False (") || !strings.Contains(out, "GPUServerReachable=False (") {
			t.Errorf("%v:\n%s", args, out)
		}
	}
	var list []sdk.Instance
	h.jsonOf(&list, a, "instances", "list", "--condition", "HostReachable=False")
	if len(list) != 1 || list[0].ID != inst.ID || len(list[0].Unhealthy()) != 2 || list[0].Unhealthy()[0].Since == nil {
		t.Fatalf("--condition HostReachable=False: %+v", list)
	}
	h.jsonOf(&list, a, "instances", "list", "--condition", "HostReachable=True")
	if len(list) != 0 {
		t.Fatalf("--condition HostReachable=True: %+v", list)
	}
	if out := h.ok(a, "instances", "get", inst.ID, "-o", "yaml"); !strings.Contains(out, "type: HostReachable") || !strings.Contains(out, `status: "False"`) {
		t.Errorf("yaml:\n%s", out)
	}
	if out := h.code(cli.ExitInvalid, a, "instances", "list", "--condition", "HostReachable=maybe"); !strings.Contains(out, "condition") {
		t.Errorf("bad --condition: %s", out)
	}
}
