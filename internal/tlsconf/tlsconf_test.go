package tlsconf_test

import (
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"gpucloud/internal/tlsconf"
	"gpucloud/internal/tlsconf/tlstest"
)

func TestBadInputIsNamed(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	cert, key := ca.Issue(t, "srv")
	if _, err := tlsconf.Server(cert, ""); err == nil {
		t.Fatal("a certificate without a key was accepted")
	}
	if _, err := tlsconf.Server(cert, cert); err == nil || !strings.Contains(err.Error(), cert) {
		t.Fatalf("certificate as key: %v", err)
	}
	notPEM := t.TempDir() + "/ca.pem"
	os.WriteFile(notPEM, []byte("hello"), 0o600)
	if _, err := tlsconf.Client(notPEM, 0); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Fatalf("CA file without certificates: %v", err)
	}
	if _, err := tlsconf.Client(t.TempDir()+"/missing.pem", 0); err == nil || !strings.Contains(err.Error(), "ca file") {
		t.Fatalf("missing CA file: %v", err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	if got, err := tlsconf.Listen(ln, "", ""); err != nil || got != ln {
		t.Fatalf("no TLS files: want the plain listener, got %v %v", got, err)
	}
	if _, err := tlsconf.Listen(ln, cert, key); err != nil {
		t.Fatal(err)
	}
}

// A renewed certificate written over the files is served on the next handshake, no restart.
func TestServerReloadsRenewedCertificate(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	cert, key := ca.Issue(t, "first")
	cfg, err := tlsconf.Server(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	serial := func() string {
		c, err := cfg.GetCertificate(nil)
		if err != nil {
			t.Fatal(err)
		}
		return string(c.Certificate[0])
	}
	before := serial()
	if serial() != before {
		t.Fatal("unchanged files gave another certificate")
	}
	cert2, key2 := ca.Issue(t, "second")
	for src, dst := range map[string]string{cert2: cert, key2: key} {
		b, _ := os.ReadFile(src)
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			t.Fatal(err)
		}
		// Modification times must differ from the first load's even on coarse clocks.
		later := time.Now().Add(2 * time.Second)
		os.Chtimes(dst, later, later)
	}
	if serial() == before {
		t.Fatal("the renewed certificate was not picked up")
	}
	// A half-written rotation (garbage key) keeps serving the last good pair.
	now := serial()
	os.WriteFile(key, []byte("partial"), 0o600)
	later := time.Now().Add(4 * time.Second)
	os.Chtimes(key, later, later)
	if serial() != now {
		t.Fatal("a broken key file replaced the served certificate")
	}
}
