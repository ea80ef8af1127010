package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gpucloud/cmd/gpuctl/cli"
	"gpucloud/internal/sshtest"
	"gpucloud/sdk"
)

func TestImagesAndSSHKeysCommands(t *testing.T) {
	h := newHarness(t)
	if out := h.ok(h.e.A.AdminKey, "images", "list"); !strings.Contains(out, "ubuntu-24.04") || !strings.Contains(out, "GUEST LIBRARIES") {
		t.Fatalf("images list:\n%s", out)
	}
	var img sdk.Image
	h.jsonOf(&img, "", "images", "create", "debian-13", "--source", "https://images.example/debian.qcow2", "--sha256", strings.Repeat("ef", 32), "--min-disk-gib", "5")
	if img.Name != "debian-13" || img.MinDiskGiB != 5 {
		t.Fatalf("created %+v", img)
	}
	h.code(cli.ExitInvalid, "", "images", "create", "bad", "--source", "ftp://x", "--sha256", "00")
	h.code(cli.ExitAuth, h.e.A.AdminKey, "images", "create", "mine", "--source", "https://x/y", "--sha256", strings.Repeat("ef", 32))

	sk := sshtest.New(t, "me@laptop")
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "id.pub")
	os.WriteFile(keyFile, []byte(sk.Line+"\n"), 0o644)
	var k sdk.SSHKey
	h.jsonOf(&k, h.e.A.AdminKey, "ssh-keys", "add", "laptop", "--public-key-file", keyFile)
	if k.Fingerprint != sk.Fingerprint {
		t.Fatalf("key %+v", k)
	}
	h.code(cli.ExitInvalid, h.e.A.AdminKey, "ssh-keys", "add", "again", "--public-key-file", keyFile)
	if out := h.ok(h.e.A.AdminKey, "ssh-keys", "list"); !strings.Contains(out, k.Fingerprint) {
		t.Fatalf("ssh-keys list:\n%s", out)
	}
	h.e.Host(t, "h1", 64)
	ud := filepath.Join(dir, "user-data")
	os.WriteFile(ud, []byte("#!/bin/sh\necho hello > /tmp/hello\n"), 0o644)
	var inst sdk.Instance
	h.jsonOf(&inst, h.e.A.AdminKey, "instances", "create", "vm1", "--type", h.e.CPU, "--image", "u", "--ssh-key-id", k.ID, "--user-data-file", ud)
	if inst.Name != "vm1" {
		t.Fatalf("instance %+v", inst)
	}
	os.WriteFile(ud, []byte("not user data"), 0o644)
	h.code(cli.ExitInvalid, h.e.A.AdminKey, "instances", "create", "vm2", "--type", h.e.CPU, "--image", "u", "--user-data-file", ud)
	h.code(cli.ExitInvalid, h.e.A.AdminKey, "instances", "create", "vm3", "--type", h.e.CPU, "--image", "nope")
	h.ok(h.e.A.AdminKey, "ssh-keys", "delete", k.ID)

	// --type takes the name `instance-types list` shows as well as the id.
	h.jsonOf(&inst, h.e.A.AdminKey, "instances", "create", "by-name", "--type", "cpu-small", "--image", "u")
	if inst.InstanceTypeID != h.e.CPU {
		t.Fatalf("--type cpu-small made an instance of type %s, want %s", inst.InstanceTypeID, h.e.CPU)
	}
	if msg := h.code(cli.ExitUsage, h.e.A.AdminKey, "instances", "create", "vm4", "--type", "local-gpu1-shared", "--image", "u"); !strings.Contains(msg, "cpu-small") {
		t.Fatalf("unknown type name: %s", msg)
	}
	// Instance commands take a name as well as an id; a name two instances share needs an id.
	var got sdk.Instance
	h.jsonOf(&got, h.e.A.AdminKey, "instances", "get", "by-name")
	if got.ID != inst.ID {
		t.Fatalf("get by-name: %s, want %s", got.ID, inst.ID)
	}
	h.code(cli.ExitNotFound, h.e.A.AdminKey, "instances", "get", "no-such-vm")
	h.code(cli.ExitNotFound, h.e.B.AdminKey, "instances", "get", inst.ID)
	h.code(cli.ExitNotFound, h.e.B.AdminKey, "instances", "get", "by-name") // tenant B has none of that name
	h.ok(h.e.A.AdminKey, "instances", "create", "by-name", "--type", "cpu-small", "--image", "u")
	if msg := h.code(cli.ExitUsage, h.e.A.AdminKey, "instances", "stop", "by-name"); !strings.Contains(msg, "give an id") {
		t.Fatalf("ambiguous name: %s", msg)
	}
}

// GPUCLOUD_API_URL names the API; the old GPUCLOUD_ENDPOINT still works, with a warning.
func TestAPIURLEnvironment(t *testing.T) {
	h := newHarness(t)
	url := h.env["GPUCLOUD_API_URL"]
	if r := h.as(h.e.A.AdminKey, "images", "list"); r.code != 0 || strings.Contains(r.err, "deprecated") {
		t.Fatalf("GPUCLOUD_API_URL: exit %d %s", r.code, r.err)
	}
	delete(h.env, "GPUCLOUD_API_URL")
	h.env["GPUCLOUD_ENDPOINT"] = url
	if r := h.as(h.e.A.AdminKey, "images", "list"); r.code != 0 || !strings.Contains(r.err, "GPUCLOUD_ENDPOINT is deprecated") {
		t.Fatalf("GPUCLOUD_ENDPOINT: exit %d %q", r.code, r.err)
	}
}

// gpuctl volumes: create, attach by instance name, detach, delete; bad sizes are usage errors
// the API names, another tenant's volume is not found.
func TestVolumesCommands(t *testing.T) {
	h := newHarness(t)
	h.e.Host(t, "h1", 64)
	var inst sdk.Instance
	h.jsonOf(&inst, h.e.A.AdminKey, "instances", "create", "vm1", "--type", "cpu-small", "--image", "u")
	var v sdk.Volume
	h.jsonOf(&v, h.e.A.AdminKey, "volumes", "create", "data", "--size-gib", "10")
	if v.SizeGiB != 10 || v.State != "available" {
		t.Fatalf("created %+v", v)
	}
	if msg := h.code(cli.ExitInvalid, h.e.A.AdminKey, "volumes", "create", "big", "--size-gib", "0"); !strings.Contains(msg, "size_gib") {
		t.Fatalf("size 0: %s", msg)
	}
	h.jsonOf(&v, h.e.A.AdminKey, "volumes", "attach", v.ID, "--instance", "vm1")
	if v.InstanceID != inst.ID || v.Device != "vdb" {
		t.Fatalf("attached %+v", v)
	}
	if out := h.ok(h.e.A.AdminKey, "volumes", "list"); !strings.Contains(out, "attached") || !strings.Contains(out, "vdb") {
		t.Fatalf("volumes list:\n%s", out)
	}
	h.code(cli.ExitNotFound, h.e.B.AdminKey, "volumes", "get", v.ID)
	h.code(cli.ExitInvalid, h.e.A.AdminKey, "volumes", "delete", v.ID) // attached: a conflict
	var detached sdk.Volume
	h.jsonOf(&detached, h.e.A.AdminKey, "volumes", "detach", v.ID)
	if detached.State != "available" || detached.InstanceID != "" {
		t.Fatalf("detached %+v", detached)
	}
	h.ok(h.e.A.AdminKey, "volumes", "delete", v.ID)
	h.code(cli.ExitNotFound, h.e.A.AdminKey, "volumes", "get", v.ID)
}
