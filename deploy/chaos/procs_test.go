package chaos

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// build compiles the three daemons, the guest library and the guest programs into a temp dir.
func build(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, s := range [][]string{
		{"go", "build", "-o", dir + "/", "../../cmd/apiserver", "../../cmd/hostd", "../../cmd/gpuserverd"},
		{"make", "-s", "-C", "../../gpuserverd/guest", "BUILD=" + dir},
		{"gcc", "-Wall", "-Werror", "-I../../gpuserverd/guest/include", "-o", filepath.Join(dir, "golden"),
			"../e2e/testdata/golden.c", "-L" + dir, "-lcuda"},
		{"gcc", "-Wall", "-Werror", "-I../../gpuserverd/guest/include", "-I../../gpuserverd/guest/tests", "-o",
			filepath.Join(dir, "steady"), "../../gpuserverd/guest/tests/steady.c", "-L" + dir, "-lcuda"},
	} {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", s, err, out)
		}
	}
	return dir
}

// daemon is one of the platform's processes, which the test kills (SIGKILL, no warning) and
// starts again with the same arguments, addresses and data directory.
type daemon struct {
	name string
	args []string
	env  []string
	log  string

	mu    sync.Mutex
	cmd   *exec.Cmd
	done  chan struct{}
	kills int
	stops int // graceful stops (SIGTERM)
	// epoch counts starts and kills: odd while the daemon runs. A guest session whose
	// gpuserverd's epoch changed (or was even) while it ran was cut by the test, not a bug.
	epoch atomic.Int64
}

func newDaemon(t *testing.T, name string, env []string, args ...string) *daemon {
	d := &daemon{name: name, args: args, env: env, log: filepath.Join(t.TempDir(), name+".log")}
	if err := d.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.kill)
	return d
}

func (d *daemon) start() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	logf, err := os.OpenFile(d.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("%s log: %w", d.name, err)
	}
	defer logf.Close()
	fmt.Fprintf(logf, "==== start\n")
	cmd := exec.Command(d.args[0], d.args[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), d.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", d.name, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	d.cmd, d.done = cmd, done
	d.epoch.Add(1)
	return nil
}

// kill SIGKILLs the daemon and waits for it to be gone.
func (d *daemon) kill() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cmd == nil {
		return
	}
	d.epoch.Add(1) // before the signal: whatever the kill breaks sees the new epoch
	d.cmd.Process.Kill()
	<-d.done
	d.cmd = nil
}

// stop is a graceful stop (SIGTERM, as systemd's restart sends): the daemon gets 10 s to exit
// before it is killed.
func (d *daemon) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cmd == nil {
		return
	}
	d.epoch.Add(1)
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
		d.cmd.Process.Kill()
		<-d.done
	}
	d.cmd = nil
}

func (d *daemon) pid() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cmd == nil {
		return 0
	}
	return d.cmd.Process.Pid
}

// tail is the end of the daemon's log, for failure messages.
func (d *daemon) tail() string {
	b, _ := os.ReadFile(d.log)
	return fmt.Sprintf("---- %s log (end):\n%s", d.name, b[max(0, len(b)-3000):])
}

// freeAddrs reserves n distinct loopback ports at once (all listeners open together, so no two
// are the same) and frees them for the daemons, which keep them across restarts.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		out = append(out, ln.Addr().String())
	}
	return out
}

// processesOf lists the pids whose executable is path (workers are gpuserverd re-executed).
func processesOf(path string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err == nil && strings.TrimSuffix(exe, " (deleted)") == path {
			pids = append(pids, pid)
		}
	}
	return pids
}
