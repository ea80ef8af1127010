package tlsconf_test

import (
	"net"
	"os"
	"strings"
	"testing"

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
