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
		{[]string{"-credential", "x", "-tenant-infra", "10.0.0.0/8,10.1.2.3/16"}, "-tenant-infra"},
		{[]string{"-credential", "x", "-tenant-infra", "fd00::/8"}, "-tenant-infra"},
		{[]string{"-credential", "x", "-qemu-user", "root"}, "-qemu-user"},
		{[]string{"-credential", "x", "-qemu-user", "0"}, "-qemu-user"},
		{[]string{"-credential", "x", "-qemu-user", "no-such-user-here"}, "-qemu-user"},
		{[]string{"-credential", "x", "-qemu-user", "3999999"}, "-qemu-user"}, // no such uid: no group to run QEMU with
		{[]string{"-credential", "x", "-console-url", "http://h:9103"}, "-console-url"},
		{[]string{"-credential", "x", "-console-url", "ws://h:9103/v1/console/"}, "-console-url"},
		{[]string{"-credential", "x", "-console-tls-cert", "/c.pem"}, "-console-tls-key"},
		{[]string{"-credential", "x", "-console-idle", "5s"}, "-console-idle"},
	} {
		if _, err := parseFlags(c.args); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want one naming %s", c.args, err, c.want)
		}
	}
	o, err = parseFlags([]string{"-credential", "x", "-network", "tenant", "-tenant-infra", "10.0.0.0/8, 192.0.2.0/24"})
	if err != nil || len(o.infraNets) != 2 || o.infraNets[1].String() != "192.0.2.0/24" {
		t.Fatalf("-tenant-infra: %v %v", o.infraNets, err)
	}
	for _, u := range []string{"nobody", "65534"} {
		if o, err = parseFlags([]string{"-credential", "x", "-network", "user", "-qemu-user", u}); err != nil || o.qemuUID != 65534 || o.qemuGID != 65534 {
			t.Fatalf("-qemu-user %s: %d:%d %v", u, o.qemuUID, o.qemuGID, err)
		}
	}
	t.Setenv("HOSTD_CREDENTIAL", "from-env")
	t.Setenv("HOSTD_LIBVIRT_URI", "qemu:///system")
	o, err = parseFlags(nil)
	if err != nil || o.credential != "from-env" || o.libvirtURI != "qemu:///system" {
		t.Fatalf("env: %+v %v", o, err)
	}
}

// The console endpoint tells the apiserver the address it really got, and the scheme its TLS says.
func TestConsoleListenURL(t *testing.T) {
	o, err := parseFlags([]string{"-credential", "x", "-console-listen", "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	ln, u, err := listenConsole(o)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if u != "ws://"+ln.Addr().String() || strings.HasSuffix(u, ":0") {
		t.Fatalf("console URL %q for %s", u, ln.Addr())
	}
	o.consoleCert, o.consoleURL = "/c.pem", ""
	ln2, u, err := listenConsole(o)
	if err != nil {
		t.Fatal(err)
	}
	ln2.Close()
	if !strings.HasPrefix(u, "wss://") {
		t.Fatalf("with TLS the URL is %q", u)
	}
	o.consoleListen = ""
	if ln, u, err := listenConsole(o); ln != nil || u != "" || err != nil {
		t.Fatalf("no -console-listen: %v %q %v", ln, u, err)
	}
}

// Other hosts dial the transfer listener where it says, or at the public name when it listens on
// every address.
func TestTransferAdvertise(t *testing.T) {
	for listen, want := range map[string]string{
		"10.0.0.5:9103": "10.0.0.5:9103", "0.0.0.0:9103": "node-7.example:9103", ":9103": "node-7.example:9103",
		"[::]:9103": "node-7.example:9103", "node-7.internal:9103": "node-7.internal:9103",
	} {
		if got := transferAdvertise(listen, "node-7.example"); got != want {
			t.Errorf("listen %s: advertised %s, want %s", listen, got, want)
		}
	}
}
