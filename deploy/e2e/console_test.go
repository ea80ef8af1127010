package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"gpucloud/cmd/gpuctl/cli"
	"gpucloud/hostd/console"
	"gpucloud/hostd/reconcile"
	"gpucloud/internal/termrelay"
	"gpucloud/sdk"
	"gpucloud/sdk/sdktest"
)

// TestInteractiveConsoleThroughTheAPI opens an instance's serial console the way gpuctl and the
// web console do: a ticket from the API, the apiserver's WebSocket, a grant to hostd's console
// server (the real one, registered through the agent API), relayed both ways. libvirt's test
// driver has no consoles, so hostd's attach hands the test the guest's end of a pipe;
// TestRealVMTenantJourney does the same against a real VM's serial port.
func TestInteractiveConsoleThroughTheAPI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env := sdktest.New(t)
	env.GPUServer(t, "gs-console", 1)
	lib := filepath.Join(t.TempDir(), "libcuda.so.1")
	os.WriteFile(lib, []byte("\x7fELF guest library stand-in"), 0o755)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	guests := make(chan net.Conn, 4)
	h := startHostWith(t, env, lib, 0, func(c *reconcile.Config) { c.ConsoleURL = "ws://" + ln.Addr().String() })
	cs := &console.Server{Auth: h.r.ConsoleAuth, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Limits: termrelay.Limits{Idle: time.Minute},
		Open: func(id string) (io.ReadWriteCloser, error) {
			guest, con := net.Pipe()
			guests <- guest
			return con, nil
		}}
	srv := &http.Server{Handler: cs.Handler(ctx)}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	tenant := env.Client(t, env.A.AdminKey)
	other := env.Client(t, env.B.AdminKey)
	inst, err := tenant.CreateInstance(ctx, sdk.CreateInstanceRequest{Name: "vm1", InstanceTypeID: sharedType(t, env, "console-shared", env.ModelID), Image: "base"})
	if err != nil {
		t.Fatal(err)
	}
	// Before it runs there is no console to open.
	if _, err := tenant.OpenConsole(ctx, inst.ID); !isStatus(err, http.StatusConflict) {
		t.Fatalf("console of a pending instance: %v", err)
	}
	h.converge(tenant, inst.ID, sdk.StateRunning)

	// Another tenant learns nothing: the instance does not exist for them.
	if _, err := other.OpenConsole(ctx, inst.ID); !sdk.IsNotFound(err) {
		t.Fatalf("another tenant's console: %v", err)
	}
	// Finance reads reports, not consoles.
	fin := env.Client(t, env.Finance)
	if _, err := fin.CreateConsoleTicket(ctx, inst.ID); !isStatus(err, http.StatusForbidden) {
		t.Fatalf("finance's console ticket: %v", err)
	}

	con, err := tenant.OpenConsole(ctx, inst.ID)
	if err != nil {
		t.Fatal(err)
	}
	guest := <-guests
	if _, err := con.Write([]byte("root\r")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(guest, buf); err != nil || string(buf) != "root\r" {
		t.Fatalf("the guest's serial port got %q %v", buf, err)
	}
	go guest.Write([]byte("# "))
	if _, err := io.ReadFull(con, buf[:2]); err != nil || string(buf[:2]) != "# " {
		t.Fatalf("the tenant saw %q %v", buf[:2], err)
	}
	// One session per instance.
	if _, err := tenant.OpenConsole(ctx, inst.ID); !isStatus(err, http.StatusConflict) {
		t.Fatalf("second session: %v", err)
	}
	// The VM's side ends (it stopped): the tenant's session ends and says why.
	guest.Close()
	if _, err := io.ReadAll(con); err != nil || con.Closed() != termrelay.EndConsole {
		t.Fatalf("after the guest closed: %v, closed %q", err, con.Closed())
	}
	con.Close()

	// A ticket opens one session: used again, it is refused.
	tk, err := tenant.CreateConsoleTicket(ctx, inst.ID)
	if err != nil {
		t.Fatal(err)
	}
	if c2, err := tenant.OpenConsole(ctx, inst.ID); err != nil {
		t.Fatalf("a new session after the first ended: %v", err)
	} else {
		(<-guests).Close()
		c2.Close()
	}
	// A page of another site cannot use a ticket (it could not get one either: the POST needs
	// the API key, or the session cookie with its CSRF header).
	if status := wsStatus(t, env.URL+tk.URL, "http://evil.example"); status != http.StatusForbidden {
		t.Fatalf("another origin: upgrade %d", status)
	}
	if status := wsStatus(t, env.URL+tk.URL); status != http.StatusSwitchingProtocols {
		t.Fatalf("fresh ticket: upgrade %d", status)
	}
	if status := wsStatus(t, env.URL+tk.URL); status != http.StatusUnauthorized {
		t.Fatalf("used ticket: upgrade %d", status)
	}
	<-guests

	// A ticket opens its own instance's console only (a try elsewhere uses it up), within 30 s.
	tk2, err := tenant.CreateConsoleTicket(ctx, inst.ID)
	if err != nil {
		t.Fatal(err)
	}
	if status := wsStatus(t, env.URL+strings.Replace(tk2.URL, inst.ID, uuid.NewString(), 1)); status != http.StatusUnauthorized {
		t.Fatalf("ticket for another instance: upgrade %d", status)
	}
	if status := wsStatus(t, env.URL+tk2.URL); status != http.StatusUnauthorized {
		t.Fatalf("ticket after a try on another instance: upgrade %d", status)
	}
	tk3, err := tenant.CreateConsoleTicket(ctx, inst.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Store.Pool.Exec(ctx, `UPDATE console_tickets SET expires_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	if status := wsStatus(t, env.URL+tk3.URL); status != http.StatusUnauthorized {
		t.Fatalf("expired ticket: upgrade %d", status)
	}

	// The audit log has who opened and closed it, with the bytes each way (the last session's
	// opening is written just after its attach: wait for it).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		opened, first := consoleAudit(ctx, t, tenant, inst.ID, env.A.AdminID)
		if opened == 3 && first != nil && first.Reason == termrelay.EndConsole {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("audit: %d sessions opened (want 3), the first's close %+v", opened, first)
		}
	}

	// gpuctl's --interactive: keystrokes go to the guest until the escape ("~." at a line's
	// start), the guest's output comes out.
	keys, typing := io.Pipe()
	var out syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- cli.Run(ctx, []string{"--endpoint", env.URL, "--api-key", env.A.AdminKey, "instances", "console", inst.ID, "--interactive"},
			cli.IO{In: keys, Out: &out, Err: io.Discard, Getenv: func(string) string { return "" }})
	}()
	guest = <-guests
	typing.Write([]byte("uptime\r"))
	buf = make([]byte, 7)
	if _, err := io.ReadFull(guest, buf); err != nil || string(buf) != "uptime\r" {
		t.Fatalf("the guest got %q %v from gpuctl", buf, err)
	}
	guest.Write([]byte("up 3 days\r\n"))
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(out.String(), "up 3 days"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("gpuctl printed %q", out.String())
		}
	}
	typing.Write([]byte("~."))
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("gpuctl --interactive exited %d", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("gpuctl did not leave on ~.")
	}
	// Leaving ends the session on the host too: the guest's end sees it close.
	guest.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := guest.Read(buf); !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("the host's console stayed open after gpuctl left: %v", err)
	}
}

// syncBuffer is a strings.Builder safe to write and read at once.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// consoleAudit counts the console sessions user opened on instance and finds the close of the
// one that moved 5 bytes in and 2 out.
func consoleAudit(ctx context.Context, t *testing.T, c *sdk.Client, instance, user string) (opened int, first *termrelay.Stats) {
	for e, err := range c.AuditEvents(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if e.ResourceID != instance || e.ActorUserID != user {
			continue
		}
		switch e.Action {
		case "console-open":
			opened++
		case "console-close":
			var d termrelay.Stats
			if json.Unmarshal(e.Detail, &d) == nil && d.In == 5 && d.Out == 2 {
				first = &d
			}
		}
	}
	return opened, first
}

// wsStatus asks for a WebSocket upgrade at u and returns the answer's status.
func wsStatus(t *testing.T, u string, origin ...string) int {
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	if len(origin) > 0 {
		req.Header.Set("Origin", origin[0])
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func isStatus(err error, status int) bool {
	var ae *sdk.APIError
	return errors.As(err, &ae) && ae.Status == status
}
