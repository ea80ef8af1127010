// Package guesttest runs the guest library and its C test programs against a real gpuserverd
// (simulated backend) on loopback.
package guesttest

import (
	"bufio"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"gpucloud/api"
	"gpucloud/gpuserverd/backend/sim"
	"gpucloud/internal/sessiontoken"
)

// build holds the guest library, the C test programs and a gpuserverd binary, built once.
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

func buildAll(t testing.TB) string {
	t.Helper()
	build.once.Do(func() {
		dir, err := os.MkdirTemp("", "gpucloud-guest-")
		if err != nil {
			build.err = err
			return
		}
		build.dir = dir
		steps := [][]string{
			{"make", "-s", "-C", "..", "BUILD=" + dir, "WERROR=-Werror"},
			{"go", "build", "-o", filepath.Join(dir, "gpuserverd"), "../../../cmd/gpuserverd"},
		}
		progs, _ := filepath.Glob("../tests/*.c")
		for _, src := range progs {
			name := strings.TrimSuffix(filepath.Base(src), ".c")
			step := []string{"gcc", "-Wall", "-Wextra", "-Werror", "-I../include", "-o", filepath.Join(dir, name), src}
			if name == "wire_test" { // the generated decoders alone, no library
				step = append(step, "../wire_gen.c")
			} else if name == "maps_test" { // the maps parser alone
				step = append(step, "../transport/maps.c")
			} else {
				step = append(step, "-L"+dir, "-lcuda", "-ldl", "-pthread")
			}
			steps = append(steps, step)
		}
		for _, s := range steps {
			if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
				build.err = fmt.Errorf("%v: %v\n%s", s, err, out)
				return
			}
		}
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	return build.dir
}

// gpuserverd is a running server on loopback with the simulated backend.
type gpuserverd struct {
	t       *testing.T
	bin     string
	addr    string
	sock    string // the Unix socket for guests on this host (shared memory)
	admin   string
	dataDir string
	priv    ed25519.PrivateKey
	cmd     *exec.Cmd
}

const serverID = "gs-test"

func startServer(t *testing.T, env ...string) *gpuserverd {
	t.Helper()
	pub, priv, _ := ed25519.GenerateKey(nil)
	return startServerOn(t, t.TempDir(), pub, priv, nil, env...)
}

// startServerOn starts gpuserverd on dataDir with extra flags: a restart passes the same dir and key.
func startServerOn(t *testing.T, dataDir string, pub ed25519.PublicKey, priv ed25519.PrivateKey, flags []string, env ...string) *gpuserverd {
	t.Helper()
	return startServerFrom(t, buildAll(t), dataDir, pub, priv, flags, env...)
}

// startServerFrom starts the gpuserverd of dir (a build of the guest programs and gpuserverd,
// possibly of another commit: launch_bench_test.go compares two) on dataDir.
func startServerFrom(t *testing.T, dir, dataDir string, pub ed25519.PublicKey, priv ed25519.PrivateKey, flags []string, env ...string) *gpuserverd {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "gpuserverd.sock")
	args := append([]string{"--id", serverID, "--listen", "127.0.0.1:0", "--listen-unix", sock,
		"--admin", "127.0.0.1:0", "--backend", "simulated", "--data-dir", dataDir,
		"--public-key", base64.StdEncoding.EncodeToString(pub)}, flags...)
	cmd := exec.Command(filepath.Join(dir, "gpuserverd"), args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = &testWriter{t: t}
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	var s gpuserverd
	if _, err2 := fmt.Sscanf(line, "listening %s admin %s", &s.addr, &s.admin); err != nil || err2 != nil {
		t.Fatalf("gpuserverd did not start: %q %v %v", line, err, err2)
	}
	s.t, s.bin, s.priv, s.cmd, s.sock, s.dataDir = t, dir, priv, cmd, sock, dataDir
	return &s
}

type testWriter struct{ t *testing.T }

func (w *testWriter) Write(p []byte) (int, error) {
	w.t.Logf("gpuserverd: %s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func (s *gpuserverd) token(session, tier string, quota uint64, mutate ...func(*sessiontoken.Claims)) string {
	now := time.Now()
	c := sessiontoken.Claims{SessionID: session, TenantID: "tenant-" + session, InstanceID: "inst-" + session,
		GPUServer: serverID, GPUs: []string{sim.UUID(0)}, Tier: tier, MemoryQuota: quota,
		IssuedAt: now.Unix(), ExpiresAt: now.Add(time.Hour).Unix()}
	for _, m := range mutate {
		m(&c)
	}
	key := s.priv
	tok, err := sessiontoken.Sign(key, c)
	if err != nil {
		s.t.Fatal(err)
	}
	return tok
}

// client returns a command running a C test program as a guest with the token.
func (s *gpuserverd) client(token string, prog string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.bin, prog), args...)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+s.bin, "GPUCLOUD_ENDPOINT="+s.addr,
		"GPUCLOUD_TOKEN="+token, "GPUCLOUD_CONFIG=/nonexistent")
	return cmd
}

func (s *gpuserverd) run(token, prog string, args ...string) string {
	s.t.Helper()
	cmd := s.client(token, prog, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		s.t.Fatalf("%s %v: %v\n%s", prog, args, err, out)
	}
	return string(out)
}

func (s *gpuserverd) get(path string) string {
	s.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+s.admin+path, nil)
	tok, err := os.ReadFile(filepath.Join(s.dataDir, "admin-token")) // generated by gpuserverd
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		s.t.Fatalf("GET %s: %s: %s", path, resp.Status, b)
	}
	return string(b)
}

func (s *gpuserverd) usage() []api.UsageRecord {
	var page struct{ Records []api.UsageRecord }
	if err := json.Unmarshal([]byte(s.get("/usage")), &page); err != nil {
		s.t.Fatal(err)
	}
	return page.Records
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// kill SIGKILLs gpuserverd and reaps it. Not cmd.Wait: that also waits for whatever holds its
// stderr, and its workers do, outliving it (they wait to be adopted).
func (s *gpuserverd) kill() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		s.t.Fatal(err)
	}
	s.cmd.Process.Wait()
}

// workers lists the server's child processes (one worker per session).
func (s *gpuserverd) workers() []int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var pids []int
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces, so parse after the last ')'.
		rest := string(b[strings.LastIndexByte(string(b), ')')+1:])
		var state string
		var ppid int
		fmt.Sscan(rest, &state, &ppid)
		if ppid == s.cmd.Process.Pid {
			var pid int
			fmt.Sscan(strings.TrimPrefix(strings.TrimSuffix(f, "/stat"), "/proc/"), &pid)
			pids = append(pids, pid)
		}
	}
	return pids
}
