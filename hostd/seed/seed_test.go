package seed_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"mime"
	"mime/multipart"
	"net/mail"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"gpucloud/hostd/seed"
)

func isoFile(t *testing.T, iso, name string) []byte {
	t.Helper()
	out, err := exec.Command("isoinfo", "-i", iso, "-R", "-x", name).Output()
	if err != nil {
		t.Fatalf("isoinfo %s: %v", name, err)
	}
	return out
}

func TestBuildSeed(t *testing.T) {
	if _, err := exec.LookPath("isoinfo"); err != nil {
		t.Skip("isoinfo (genisoimage package) not installed")
	}
	lib := []byte("\x7fELF fake guest library bytes \x00\x01\x02")
	c := seed.Config{
		InstanceID: "i-123", Hostname: "vm1", Endpoints: []string{"10.0.0.5:7000", "10.0.0.6:7000"},
		Token: "tok.abc-def", TokenExpiresAt: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC),
		Tier: "shared", GPUModel: "H100", SSHKeys: []string{"ssh-ed25519 AAAA user@host"}, Library: lib,
	}
	dir := t.TempDir()
	iso := filepath.Join(dir, "seed.iso")
	os.MkdirAll(filepath.Join(dir, ".seed-123", "root"), 0o755) // left by a build killed half-way
	if err := seed.Build(context.Background(), c, iso); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("seed dir holds %d entries, want only seed.iso", len(entries))
	}
	pvd, err := exec.Command("isoinfo", "-d", "-i", iso).Output()
	if err != nil || !strings.Contains(string(pvd), "Volume id: cidata") {
		t.Fatalf("volume id: %v\n%s", err, pvd)
	}
	conf := string(isoFile(t, iso, "/gpucloud/guest.conf"))
	for _, want := range []string{"GPUCLOUD_ENDPOINT=10.0.0.5:7000\n", "GPUCLOUD_TOKEN=tok.abc-def\n", "GPUCLOUD_TIER=shared\n", "GPUCLOUD_TOKEN_EXPIRES=2030-01-02T03:04:05Z\n"} {
		if !strings.Contains(conf, want) {
			t.Errorf("guest.conf lacks %q:\n%s", want, conf)
		}
	}
	if got := isoFile(t, iso, "/gpucloud/libcuda.so.1"); !bytes.Equal(got, lib) {
		t.Errorf("library on ISO differs")
	}
	ud := isoFile(t, iso, "/user-data")
	if !bytes.HasPrefix(ud, []byte("#cloud-config\n")) {
		t.Fatalf("user-data header: %q", ud[:20])
	}
	var doc struct {
		WriteFiles []struct{ Path, Encoding, Content string } `yaml:"write_files"`
		RunCmd     [][]string                                 `yaml:"runcmd"`
	}
	if err := yaml.Unmarshal(ud, &doc); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range doc.WriteFiles {
		if f.Path == "/usr/lib/gpucloud/libcuda.so.1" {
			b, err := base64.StdEncoding.DecodeString(f.Content)
			found = err == nil && bytes.Equal(b, lib)
		}
		if f.Path == "/etc/gpucloud/guest.conf" && f.Content != conf {
			t.Errorf("user-data guest.conf differs from the ISO's")
		}
	}
	if !found {
		t.Error("user-data does not install the library as libcuda.so.1")
	}
	if md := string(isoFile(t, iso, "/meta-data")); !strings.Contains(md, "instance-id: i-123") {
		t.Errorf("meta-data: %s", md)
	}
}

func TestBuildRejectsInjection(t *testing.T) {
	dir := t.TempDir()
	iso := filepath.Join(dir, "seed.iso")
	for _, c := range []seed.Config{
		{InstanceID: "i", Token: "tok\nGPUCLOUD_ENDPOINT=evil:1"},
		{InstanceID: "i", Endpoints: []string{"a:1,b:2"}},
		{InstanceID: ""},
		{InstanceID: "i", Tier: "x\"y"},
		{InstanceID: "i", SSHKeys: []string{"ssh-ed25519 AAAA a\nssh-rsa BBBB evil"}},
		{InstanceID: "i", UserData: "#!/bin/sh\n" + strings.Repeat("x", 16<<10)},
	} {
		if err := seed.Build(context.Background(), c, iso); err == nil {
			t.Errorf("accepted %+v", c)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("rejected seeds left %d files", len(entries))
	}
}

// A tenant's user-data rides with gpucloud's own as a MIME multipart that cloud-init runs part
// by part; the keys and the user-data also lie plainly on the ISO.
func TestSeedCarriesKeysAndUserData(t *testing.T) {
	if _, err := exec.LookPath("isoinfo"); err != nil {
		t.Skip("isoinfo (genisoimage package) not installed")
	}
	keys := []string{"ssh-ed25519 AAAAC3Nza first@laptop", "ssh-rsa AAAAB3Nza second@ci"}
	tenant := "#cloud-config\nwrite_files:\n- path: /etc/motd\n  content: hello from user-data\n"
	iso := filepath.Join(t.TempDir(), "seed.iso")
	if err := seed.Build(context.Background(), seed.Config{InstanceID: "i-1", Hostname: "vm", SSHKeys: keys, UserData: tenant}, iso); err != nil {
		t.Fatal(err)
	}
	if got := string(isoFile(t, iso, "/gpucloud/authorized_keys")); got != keys[0]+"\n"+keys[1]+"\n" {
		t.Fatalf("authorized_keys %q", got)
	}
	if got := string(isoFile(t, iso, "/gpucloud/user-data")); got != tenant {
		t.Fatalf("plain user-data %q", got)
	}
	ud := isoFile(t, iso, "/user-data")
	msg, err := mail.ReadMessage(bytes.NewReader(ud))
	if err != nil {
		t.Fatalf("user-data is not MIME: %v\n%s", err, ud)
	}
	_, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil {
		t.Fatal(err)
	}
	r := multipart.NewReader(msg.Body, params["boundary"])
	var types []string
	var own, theirs []byte
	for {
		p, err := r.NextPart()
		if err != nil {
			break
		}
		body, _ := io.ReadAll(p)
		types = append(types, strings.Split(p.Header.Get("Content-Type"), ";")[0])
		if len(types) == 1 {
			own = body
		} else {
			theirs = body
			if p.Header.Get("Merge-Type") == "" {
				t.Error("the tenant's part does not say how it merges")
			}
		}
	}
	if strings.Join(types, ",") != "text/cloud-config,text/cloud-config" || string(theirs) != tenant {
		t.Fatalf("parts %v, tenant part %q", types, theirs)
	}
	var doc struct {
		Keys        []string `yaml:"ssh_authorized_keys"`
		DisableRoot *bool    `yaml:"disable_root"`
	}
	if err := yaml.Unmarshal(own, &doc); err != nil || len(doc.Keys) != 2 || doc.Keys[1] != keys[1] || doc.DisableRoot == nil || *doc.DisableRoot {
		t.Fatalf("gpucloud part keys %v (%v)", doc.Keys, err)
	}
	// A script is a shell-script part.
	if err := seed.Build(context.Background(), seed.Config{InstanceID: "i-1", UserData: "#!/bin/sh\necho hi > /tmp/x\n"}, iso); err != nil {
		t.Fatal(err)
	}
	if ud := isoFile(t, iso, "/user-data"); !bytes.Contains(ud, []byte("Content-Type: text/x-shellscript")) {
		t.Fatalf("script part missing:\n%s", ud)
	}
}
