package cli_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"gpucloud/cmd/gpuctl/cli"
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

	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	sp, _ := ssh.NewPublicKey(pub)
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "id.pub")
	os.WriteFile(keyFile, append(ssh.MarshalAuthorizedKey(sp)[:len(ssh.MarshalAuthorizedKey(sp))-1], []byte(" me@laptop\n")...), 0o644)
	var k sdk.SSHKey
	h.jsonOf(&k, h.e.A.AdminKey, "ssh-keys", "add", "laptop", "--public-key-file", keyFile)
	if k.Fingerprint != ssh.FingerprintSHA256(sp) {
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
}
