package cli_test

import (
	"os"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"gpucloud/cmd/gpuctl/cli"
	"gpucloud/sdk"
)

func TestProfilesAndEnvironmentOverrides(t *testing.T) {
	h := newHarness(t)
	url := h.env["GPUCLOUD_API_URL"]
	delete(h.env, "GPUCLOUD_API_URL")
	delete(h.env, "GPUCLOUD_API_KEY")

	// Nothing configured: a usage error naming the fix.
	if errs := h.code(cli.ExitUsage, "", "whoami"); !strings.Contains(errs, "no endpoint") {
		t.Fatalf("unconfigured: %s", errs)
	}
	h.ok("", "config", "set-profile", "ops", "--endpoint", url, "--api-key", h.e.Operator)
	h.ok("", "config", "set-profile", "tenant-a", "--endpoint", url, "--api-key", h.e.A.AdminKey)
	st, err := os.Stat(h.configFile())
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("config file %v %v: must exist, owner-only", st, err)
	}
	var me sdk.Me
	h.jsonOf(&me, "", "whoami") // the first profile became the current one
	if me.Role != sdk.RoleOperator {
		t.Fatalf("current profile: %+v", me)
	}
	h.jsonOf(&me, "", "whoami", "--profile", "tenant-a")
	if me.Role != sdk.RoleTenantAdmin || me.TenantID != h.e.A.ID {
		t.Fatalf("--profile tenant-a: %+v", me)
	}
	h.env["GPUCLOUD_PROFILE"] = "tenant-a"
	h.jsonOf(&me, "", "whoami")
	if me.TenantID != h.e.A.ID {
		t.Fatalf("GPUCLOUD_PROFILE: %+v", me)
	}
	// The key from the environment beats the profile's; the flag beats both.
	h.env["GPUCLOUD_API_KEY"] = h.e.B.AdminKey
	h.jsonOf(&me, "", "whoami")
	if me.TenantID != h.e.B.ID {
		t.Fatalf("GPUCLOUD_API_KEY: %+v", me)
	}
	h.jsonOf(&me, "", "whoami", "--api-key", h.e.Operator)
	if me.Role != sdk.RoleOperator {
		t.Fatalf("--api-key: %+v", me)
	}
	delete(h.env, "GPUCLOUD_API_KEY")
	h.env["GPUCLOUD_PROFILE"] = "nope"
	if errs := h.code(cli.ExitUsage, "", "whoami"); !strings.Contains(errs, `no profile "nope"`) {
		t.Fatalf("unknown profile: %s", errs)
	}
	delete(h.env, "GPUCLOUD_PROFILE")
	h.ok("", "config", "use", "tenant-a")
	h.jsonOf(&me, "", "whoami")
	if me.TenantID != h.e.A.ID {
		t.Fatalf("after config use: %+v", me)
	}
	h.code(cli.ExitUsage, "", "config", "use", "nope")

	// view masks the keys, in every format.
	out := h.ok("", "config", "view", "-o", "yaml")
	var rows []map[string]any
	if err := yaml.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 2 {
		t.Fatalf("config view yaml: %v\n%s", err, out)
	}
	if strings.Contains(out, h.e.Operator) || strings.Contains(out, h.e.A.AdminKey) {
		t.Fatalf("config view shows a key:\n%s", out)
	}
	// A broken file is reported, not ignored.
	if err := os.WriteFile(h.configFile(), []byte("profiles: [oops"), 0o600); err != nil {
		t.Fatal(err)
	}
	if errs := h.code(cli.ExitUsage, "", "whoami"); !strings.Contains(errs, "config.yaml") {
		t.Fatalf("broken config: %s", errs)
	}
}

func TestExitCodesAndUsage(t *testing.T) {
	h := newHarness(t)
	missing := "00000000-0000-0000-0000-000000000009"
	h.code(cli.ExitAuth, "gck_bogus", "whoami")                          // bad key
	h.code(cli.ExitAuth, h.e.A.AdminKey, "tenants", "list")              // forbidden
	h.code(cli.ExitAuth, h.e.A.AdminKey, "hosts", "list")                // forbidden
	h.code(cli.ExitNotFound, "", "tenants", "get", missing)              // not found
	h.code(cli.ExitNotFound, "", "instances", "get", "not-an-id")        // not found
	h.code(cli.ExitNotFound, h.e.A.AdminKey, "tenants", "get", h.e.B.ID) // another tenant's
	if errs := h.code(cli.ExitInvalid, "", "tenants", "create", "Bad Name"); !strings.Contains(errs, "name") {
		t.Fatalf("validation error does not name the field: %s", errs)
	}
	h.ok("", "tenants", "create", "dup")
	h.code(cli.ExitInvalid, "", "tenants", "create", "dup")                     // conflict
	h.code(cli.ExitUsage, "", "tenants", "get")                                 // missing argument
	h.code(cli.ExitUsage, "", "tenants", "list", "-o", "xml")                   // bad format
	h.code(cli.ExitUsage, "", "tenants", "create", "x", "--quota-gpus", "many") // bad flag value
	h.code(cli.ExitUsage, "", "frobnicate")                                     // unknown command
	h.code(cli.ExitUsage, "", "quota", "set", h.e.A.ID, "--gpus", "1")          // required flags
	h.code(cli.ExitUsage, "", "instances", "list", "--endpoint", "ftp://x")     // bad endpoint
	// Nothing listens: the SDK retries, then gpuctl says "unavailable".
	h.code(cli.ExitUnavailable, "", "whoami", "--endpoint", "http://127.0.0.1:1")
}

func TestCompletion(t *testing.T) {
	h := newHarness(t)
	for _, sh := range []string{"bash", "zsh", "fish"} {
		if out := h.ok("", "completion", sh); !strings.Contains(out, "gpuctl") {
			t.Fatalf("completion %s: %q", sh, out[:min(len(out), 200)])
		}
	}
	// Cobra's hidden completion entry point completes subcommands and flag values.
	if out := h.ok("", "__complete", "inst"); !strings.Contains(out, "instances") || !strings.Contains(out, "instance-types") {
		t.Fatalf("complete 'inst': %s", out)
	}
	if out := h.ok("", "__complete", "tenants", "list", "-o", ""); !strings.Contains(out, "yaml") {
		t.Fatalf("complete -o: %s", out)
	}
	// Ids complete from the API, with names; for hosts and for the GPU server subcommands.
	hostID, _ := h.e.Host(t, "h1", 8)
	gsID, _ := h.e.GPUServer(t, "g1", 1)
	if out := h.ok("", "__complete", "hosts", "drain", ""); !strings.Contains(out, hostID+"\th1") {
		t.Fatalf("complete host id: %s", out)
	}
	if out := h.ok("", "__complete", "gpu-servers", "sessions", ""); !strings.Contains(out, gsID+"\tg1") {
		t.Fatalf("complete GPU server id: %s", out)
	}
	inst, err := h.e.Client(t, h.e.A.AdminKey).CreateInstance(t.Context(), sdk.CreateInstanceRequest{Name: "vm", InstanceTypeID: h.e.CPU, Image: "u"})
	if err != nil {
		t.Fatal(err)
	}
	if out := h.ok(h.e.A.AdminKey, "__complete", "instances", "stop", ""); !strings.Contains(out, inst.ID+"\tvm (pending)") {
		t.Fatalf("complete instance id: %s", out)
	}
	// Tenant B's completion does not offer A's instance.
	if out := h.ok(h.e.B.AdminKey, "__complete", "instances", "stop", ""); strings.Contains(out, inst.ID) {
		t.Fatalf("B completes A's instance: %s", out)
	}
}
