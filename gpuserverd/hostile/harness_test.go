// Package hostile attacks a real gpuserverd process (simulated backend) as a hostile tenant
// would (issue 13): floods before authentication, too many sessions, an instance's sessions
// together past its quota, the admin port without its token, LaneHello as an oracle.
package hostile

import (
	"bufio"
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"gpucloud/gpuserverd/backend/sim"
	"gpucloud/gpuserverd/wire"
	"gpucloud/internal/sessiontoken"
)

var build struct {
	once sync.Once
	dir  string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
	os.Exit(code)
}

// binary builds gpuserverd once ($HOSTILE_GPUSERVERD names another build to attack instead,
// e.g. an older one to see these tests fail).
func binary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("HOSTILE_GPUSERVERD"); bin != "" {
		return bin
	}
	build.once.Do(func() {
		if build.dir, build.err = os.MkdirTemp("", "gpucloud-hostile-"); build.err != nil {
			return
		}
		out, err := exec.Command("go", "build", "-o", filepath.Join(build.dir, "gpuserverd"), "../../cmd/gpuserverd").CombinedOutput()
		if err != nil {
			build.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	return filepath.Join(build.dir, "gpuserverd")
}

const serverID = "gs-hostile"

// server is a running gpuserverd.
type server struct {
	t           *testing.T
	addr, admin string
	dataDir     string
	priv        ed25519.PrivateKey
	cmd         *exec.Cmd
}

func start(t *testing.T, flags ...string) *server {
	t.Helper()
	pub, priv, _ := ed25519.GenerateKey(nil)
	s := &server{t: t, dataDir: t.TempDir(), priv: priv}
	args := append([]string{"--id", serverID, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0",
		"--backend", "simulated", "--data-dir", s.dataDir, "--public-key", base64.StdEncoding.EncodeToString(pub)}, flags...)
	s.cmd = exec.Command(binary(t), args...)
	s.cmd.Stderr = io.Discard
	if testing.Verbose() {
		s.cmd.Stderr = os.Stderr
	}
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, _ := s.cmd.StdoutPipe()
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { s.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			s.cmd.Process.Kill()
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if _, err2 := fmt.Sscanf(line, "listening %s admin %s", &s.addr, &s.admin); err != nil || err2 != nil {
		t.Fatalf("gpuserverd did not start: %q %v %v", line, err, err2)
	}
	return s
}

// token signs a token for instance with the given tier and quota.
func (s *server) token(instance, tier string, quota uint64) string {
	now := time.Now()
	tok, err := sessiontoken.Sign(s.priv, sessiontoken.Claims{SessionID: instance, TenantID: "tenant-" + instance,
		InstanceID: instance, GPUServer: serverID, GPUs: []string{sim.UUID(0)}, Tier: tier, MemoryQuota: quota,
		IssuedAt: now.Unix(), ExpiresAt: now.Add(time.Hour).Unix()})
	if err != nil {
		s.t.Fatal(err)
	}
	return tok
}

// rss is the server process's resident set, in bytes.
func (s *server) rss() uint64 {
	s.t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		s.t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	s.t.Fatal("no VmRSS")
	return 0
}

// workers lists the server's child processes (one worker per session).
func (s *server) workers() []int {
	s.t.Helper()
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after its closing paren.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(s.cmd.Process.Pid) {
			out = append(out, pid)
		}
	}
	return out
}

// get fetches an admin path with the given Authorization header ("" for none).
func (s *server) get(path, auth string) (int, string) {
	s.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+s.admin+path, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// adminAuth is the Authorization header gpuserverd's generated admin token makes.
func (s *server) adminAuth() string {
	s.t.Helper()
	b, err := os.ReadFile(filepath.Join(s.dataDir, "admin-token"))
	if err != nil {
		s.t.Fatal(err)
	}
	return "Bearer " + strings.TrimSpace(string(b))
}

// client is one connection speaking the wire protocol.
type client struct {
	t    *testing.T
	conn net.Conn
	req  uint32
}

// dial connects from local ("" for any address).
func (s *server) dial(local string) *client {
	s.t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second}
	if local != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(local)}
	}
	conn, err := d.Dial("tcp", s.addr)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { conn.Close() })
	return &client{t: s.t, conn: conn}
}

// hello opens a session with tok and returns the server's answer.
func (s *server) hello(tok string) (*client, wire.HelloReply) {
	s.t.Helper()
	c := s.dial("")
	var r wire.HelloReply
	c.send(&wire.Hello{Version: wire.Version, Token: tok})
	c.read(&r)
	return c, r
}

func (c *client) send(m wire.Message) {
	c.t.Helper()
	c.req++
	if _, err := c.conn.Write(wire.AppendFrame(nil, m, 0, c.req)); err != nil {
		c.t.Fatal(err)
	}
}

func (c *client) read(m wire.Message) {
	c.t.Helper()
	c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	h, p, err := wire.ReadFrame(c.conn, nil)
	if err != nil {
		c.t.Fatalf("reading %s: %v", m.Type(), err)
	}
	if h.Type != m.Type() {
		c.t.Fatalf("got %s, want %s", h.Type, m.Type())
	}
	if err := m.Decode(p); err != nil {
		c.t.Fatal(err)
	}
}

// alloc asks for n bytes of device memory and returns the CUDA result.
func (c *client) alloc(n uint64) int32 {
	c.t.Helper()
	var r wire.HandleReply
	c.send(&wire.MemAlloc{Bytes: n})
	c.read(&r)
	return r.Result
}
