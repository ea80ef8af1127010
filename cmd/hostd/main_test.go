package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseFlags(t *testing.T) {
	os.Unsetenv("HOSTD_CREDENTIAL")
	cred := filepath.Join(t.TempDir(), "cred")
	os.WriteFile(cred, []byte("s3cret\n"), 0o600)
	o, err := parseFlags([]string{"-credential-file", cred, "-data-dir", "/d", "-network", "bridge:br0"})
	if err != nil || o.credential != "s3cret" || o.imagesDir != "/d/images" {
		t.Fatalf("%+v %v", o, err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{}, "-credential"},
		{[]string{"-credential", "x", "-network", "wifi"}, "-network"},
		{[]string{"-credential", "x", "-interval", "1ms"}, "-interval"},
		{[]string{"-credential", "x", "-guest-library", "/no/such/lib"}, "-guest-library"},
	} {
		if _, err := parseFlags(c.args); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want one naming %s", c.args, err, c.want)
		}
	}
	t.Setenv("HOSTD_CREDENTIAL", "from-env")
	t.Setenv("HOSTD_LIBVIRT_URI", "qemu:///system")
	o, err = parseFlags(nil)
	if err != nil || o.credential != "from-env" || o.libvirtURI != "qemu:///system" {
		t.Fatalf("env: %+v %v", o, err)
	}
}
