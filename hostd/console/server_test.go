package console_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"golang.org/x/net/websocket"

	"gpucloud/api"
	"gpucloud/hostd/console"
	"gpucloud/hostd/virt"
	"gpucloud/internal/consolegrant"
	"gpucloud/internal/termrelay"
)

type host struct {
	url  string
	priv ed25519.PrivateKey
	id   string
}

// serve runs a console server for host "host-1" whose consoles come from open.
func serve(t *testing.T, open func(id string) (io.ReadWriteCloser, error)) host {
	t.Helper()
	pub, priv, _ := ed25519.GenerateKey(nil)
	cs := &console.Server{
		Auth:   func() (string, ed25519.PublicKey) { return "host-1", pub },
		Open:   open,
		Limits: termrelay.Limits{MaxFrame: 1024, Idle: time.Minute},
		Log:    slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv := httptest.NewServer(cs.Handler(ctx))
	t.Cleanup(func() { cancel(); srv.Close() })
	return host{url: "ws" + strings.TrimPrefix(srv.URL, "http"), priv: priv, id: "host-1"}
}

func (h host) grant(t *testing.T, instance, hostID string) string {
	g, err := consolegrant.Sign(h.priv, consolegrant.New(instance, "tenant-1", hostID, "user-1", time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// dial connects as the apiserver does and reads the hello.
func (h host) dial(instance, grant string) (*websocket.Conn, api.ConsoleHello, error) {
	cfg, err := websocket.NewConfig(h.url+api.ConsolePath+instance, "http://apiserver")
	if err != nil {
		return nil, api.ConsoleHello{}, err
	}
	if grant != "" {
		cfg.Header.Set("Authorization", "Bearer "+grant)
	}
	ws, err := websocket.DialConfig(cfg)
	if err != nil {
		return nil, api.ConsoleHello{}, err
	}
	var hello api.ConsoleHello
	if err := websocket.JSON.Receive(ws, &hello); err != nil {
		ws.Close()
		return nil, hello, err
	}
	return ws, hello, nil
}

// refused reports whether the host answered the upgrade with an HTTP error.
func refused(err error) bool {
	var de *websocket.DialError
	return errors.As(err, &de) && de.Err == websocket.ErrBadStatus
}

// pipeConsoles stands in for libvirt's console streams: each open hands the test the guest's end.
func pipeConsoles() (func(string) (io.ReadWriteCloser, error), <-chan net.Conn) {
	guests := make(chan net.Conn, 4)
	return func(string) (io.ReadWriteCloser, error) {
		guest, con := net.Pipe()
		guests <- guest
		return con, nil
	}, guests
}

func TestConsoleRelaysWithAValidGrantOnce(t *testing.T) {
	open, guests := pipeConsoles()
	h := serve(t, open)
	inst := uuid.NewString()
	g := h.grant(t, inst, h.id)
	ws, hello, err := h.dial(inst, g)
	if err != nil || hello.Status != 200 {
		t.Fatalf("dial: %+v %v", hello, err)
	}
	defer ws.Close()
	guest := <-guests
	websocket.Message.Send(ws, []byte("root\r"))
	buf := make([]byte, 5)
	if _, err := io.ReadFull(guest, buf); err != nil || string(buf) != "root\r" {
		t.Fatalf("guest got %q %v", buf, err)
	}
	go guest.Write([]byte("Password: "))
	var out []byte
	if err := websocket.Message.Receive(ws, &out); err != nil || string(out) != "Password: " {
		t.Fatalf("user got %q %v", out, err)
	}
	// While it is attached, a second session (a new grant) is told the console is busy.
	if _, hello, err := h.dial(inst, h.grant(t, inst, h.id)); err != nil || hello.Status != 409 {
		t.Fatalf("second session: %+v %v", hello, err)
	}
	// The same grant again is refused before any upgrade.
	ws.Close()
	guest.Close()
	if _, _, err := h.dial(inst, g); !refused(err) {
		t.Fatalf("replayed grant: %v", err)
	}
}

func TestConsoleRefusesBadGrants(t *testing.T) {
	open, guests := pipeConsoles()
	h := serve(t, open)
	inst := uuid.NewString()
	_, otherPriv, _ := ed25519.GenerateKey(nil)
	forged, _ := consolegrant.Sign(otherPriv, consolegrant.New(inst, "tenant-1", h.id, "", time.Now()))
	for name, tc := range map[string]struct{ instance, grant string }{
		"none":            {inst, ""},
		"other instance":  {inst, h.grant(t, uuid.NewString(), h.id)},
		"other host":      {inst, h.grant(t, inst, "host-2")},
		"forged":          {inst, forged},
		"not a uuid":      {"../etc", h.grant(t, "../etc", h.id)},
		"a session token": {inst, "gct1.e30.AAAA"},
	} {
		if _, _, err := h.dial(tc.instance, tc.grant); !refused(err) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if len(guests) != 0 {
		t.Fatal("a console was opened for a refused grant")
	}
}

// On libvirt's test driver (no consoles) the apiserver hears 501, and 404 for a VM the host lacks.
func TestConsoleReportsWhyItCannotOpen(t *testing.T) {
	hv, err := virt.Open("test:///default", "")
	if err != nil {
		t.Fatal(err)
	}
	defer hv.Close()
	dir := t.TempDir()
	inst := uuid.NewString()
	err = hv.Define(virt.DomainSpec{Meta: virt.Metadata{InstanceID: inst, TenantID: "tenant-1"}, Type: "test", VCPUs: 1, MemoryMiB: 64,
		Disk: dir + "/disk.qcow2", Seed: dir + "/seed.iso", ConsoleLog: dir + "/console.log", Network: virt.Network{Kind: "user"}})
	if err != nil {
		t.Fatal(err)
	}
	defer hv.Undefine(virt.DomainName(inst))
	if err := hv.Start(virt.DomainName(inst)); err != nil {
		t.Fatal(err)
	}
	h := serve(t, func(id string) (io.ReadWriteCloser, error) { return hv.OpenConsole(virt.DomainName(id)) })
	if _, hello, err := h.dial(inst, h.grant(t, inst, h.id)); err != nil || hello.Status != 501 {
		t.Fatalf("test driver: %+v %v", hello, err)
	}
	missing := uuid.NewString()
	if _, hello, err := h.dial(missing, h.grant(t, missing, h.id)); err != nil || hello.Status != 404 {
		t.Fatalf("missing VM: %+v %v", hello, err)
	}
}
