package cli_test

import (
	"net"
	"net/http"
	"strings"
	"testing"

	"gpucloud/internal/tlsconf"
	"gpucloud/internal/tlsconf/tlstest"
)

// gpuctl reaches an https apiserver whose certificate a private CA signed, given that CA by
// --ca-file or $GPUCLOUD_CA_FILE, and refuses it otherwise.
func TestPrivateCA(t *testing.T) {
	h := newHarness(t)
	ca := tlstest.NewCA(t, "gpucloud test CA")
	cert, key := ca.Issue(t, "apiserver")
	// As `apiserver serve --tls-cert --tls-key` listens.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tln, err := tlsconf.Listen(ln, cert, key)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: h.e.Server.Handler()}
	go hs.Serve(tln)
	t.Cleanup(func() { hs.Close() })
	h.env["GPUCLOUD_API_URL"] = "https://" + ln.Addr().String()

	if r := h.run("me"); r.code == 0 || !strings.Contains(r.err, "certificate") {
		t.Fatalf("system roots: exit %d, %q; want a certificate error", r.code, r.err)
	}
	if r := h.run("--ca-file", ca.File, "me", "-o", "json"); r.code != 0 || !strings.Contains(r.out, "operator") {
		t.Fatalf("--ca-file: exit %d, out %q, err %q", r.code, r.out, r.err)
	}
	h.env["GPUCLOUD_CA_FILE"] = ca.File
	if r := h.run("me", "-o", "json"); r.code != 0 || !strings.Contains(r.out, "operator") {
		t.Fatalf("GPUCLOUD_CA_FILE: exit %d, out %q, err %q", r.code, r.out, r.err)
	}
	other := tlstest.NewCA(t, "another CA")
	if r := h.run("--ca-file", other.File, "me"); r.code == 0 || !strings.Contains(r.err, "certificate") {
		t.Fatalf("another CA (the flag beats the environment): exit %d, %q", r.code, r.err)
	}
}
