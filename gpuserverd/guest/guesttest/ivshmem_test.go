package guesttest

import (
	"bufio"
	"crypto/ed25519"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"gpucloud/gpuserverd/ivshmem"
	"gpucloud/internal/sessiontoken"
)

// A VM's ivshmem channel, without the VM: the guest library maps the channel file itself (as a
// VM maps the device's BAR 2 through sysfs), and gpuserverd serves the file from --ivshmem-dir.

// channelFile creates an instance's channel file in dir as hostd does: 0600, 16 MiB.
func channelFile(t *testing.T, dir, instance string) string {
	t.Helper()
	return channelFileOf(t, dir, instance, 16<<20)
}

func channelFileOf(t *testing.T, dir, instance string, size int64) string {
	t.Helper()
	path := filepath.Join(dir, ivshmem.FilePrefix+instance)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	return path
}

// channelState reads the channel's first slot header's state and generation from the file.
func channelState(t *testing.T, path string) (state, gen uint32) {
	t.Helper()
	return slotState(t, path, 0, 0)
}

// startIvshmemServer starts gpuserverd serving channel files in a new directory.
func startIvshmemServer(t *testing.T, extra ...string) (*gpuserverd, string) {
	t.Helper()
	return startIvshmemServerIn(t, t.TempDir(), extra...)
}

// startIvshmemServerIn serves channel files in dir: /dev/shm (tmpfs) where a measurement must
// not pay for a disk file's page cache, as production's channels do not.
func startIvshmemServerIn(t *testing.T, dir string, extra ...string) (*gpuserverd, string) {
	t.Helper()
	pub, priv, _ := ed25519.GenerateKey(nil)
	s := startServerOn(t, t.TempDir(), pub, priv, append([]string{"--ivshmem-dir", dir}, extra...))
	return s, dir
}

// tmpfsDir is a new directory in /dev/shm, removed after the test.
func tmpfsDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/dev/shm", "guesttest-ivshmem-") // not hostd's gpucloud- prefix
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// waitFree waits until gpuserverd has set the channel up (or reset it after a session).
func waitFree(t *testing.T, path string, after uint32) uint32 {
	t.Helper()
	var gen uint32
	waitFor(t, "channel "+path+" free", func() bool {
		st, g := channelState(t, path)
		gen = g
		return st == ivshmem.StateFree && g > after
	})
	return gen
}

// ivshmemClient runs prog as a guest over the channel at path.
func (s *gpuserverd) ivshmemClient(token, path, prog string, args ...string) *exec.Cmd {
	cmd := s.client(token, prog, args...)
	cmd.Env = append(cmd.Env, "GPUCLOUD_ENDPOINT=ivshmem:"+path, "GPUCLOUD_TRACE=1")
	return cmd
}

func TestIvshmem(t *testing.T) {
	s, dir := startIvshmemServer(t)
	path := channelFile(t, dir, "inst-vm1")
	gen := waitFree(t, path, 0)
	// Twice on one channel: the second process claims it after the first let it go.
	for i, prog := range []string{"api_test", "shm_test"} {
		out, err := s.ivshmemClient(s.token("vm1", "shared", 1<<30), path, prog).CombinedOutput()
		if err != nil {
			t.Fatalf("%s over ivshmem:%s: %v\n%s", prog, path, err, tail(string(out)))
		}
		for _, want := range []string{"ivshmem channel " + path, "shared arena: 16777216 bytes", "send MemcpyHtoDShm", "send MemcpyDtoHShm"} {
			if !strings.Contains(string(out), want) {
				t.Fatalf("%s: %q missing:\n%s", prog, want, tail(string(out)))
			}
		}
		for _, socketCopy := range []string{"send MemcpyHtoD (", "send MemcpyDtoH (", "Striped", "LanesOpen", "ShmOpen"} {
			if strings.Contains(string(out), socketCopy) {
				t.Fatalf("%s: %q over an ivshmem channel:\n%s", prog, socketCopy, tail(string(out)))
			}
		}
		gen = waitFree(t, path, gen)
		waitFor(t, "usage records", func() bool { return len(s.usage()) == i+1 })
	}
	if recs := s.usage(); recs[0].InstanceID != "inst-vm1" || recs[0].BytesMoved == 0 {
		t.Fatalf("usage %+v", recs[0])
	}
}

// Refusals come through the region, named; the channel is free again afterwards. A token for
// another instance is refused: a VM's channel serves only its own instance's sessions.
func TestIvshmemRefused(t *testing.T) {
	s, dir := startIvshmemServer(t)
	path := channelFile(t, dir, "inst-vm2")
	gen := waitFree(t, path, 0)
	other := s.token("vm3", "shared", 1<<30) // instance inst-vm3
	forged := s.token("vm2", "shared", 1<<30)
	forged = forged[:len(forged)-4] + "AAAA"
	for _, tc := range []struct{ token, want string }{
		{other, `refused the session: session token is for instance "inst-vm3", not "inst-vm2" whose ivshmem channel this is`},
		{forged, "refused the session: session token refused"},
	} {
		out, _ := s.ivshmemClient(tc.token, path, "probe", "init").CombinedOutput()
		if !strings.Contains(string(out), tc.want) || !strings.Contains(string(out), "INIT 800 ") {
			t.Fatalf("want %q and CUDA_ERROR_NOT_PERMITTED:\n%s", tc.want, tail(string(out)))
		}
		gen = waitFree(t, path, gen)
	}
	// A refused process that lives on has let the channel go: the rightful one gets it meanwhile.
	refused := s.ivshmemClient(other, path, "probe", "init-wait")
	stdin, _ := refused.StdinPipe()
	stdout, _ := refused.StdoutPipe()
	if err := refused.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { refused.Process.Kill(); refused.Wait() })
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); !strings.HasPrefix(line, "INIT 800 ") {
		t.Fatalf("refused process: %q", line)
	}
	start := time.Now()
	waitFree(t, path, gen)
	if d := time.Since(start); d > 2*time.Second { // gpuserverd's own limit would be 10 s
		t.Fatalf("the channel was freed %v after the refusal", d)
	}
	out, err := s.ivshmemClient(s.token("vm2", "shared", 1<<30), path, "probe", "init").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "INIT 0 ") {
		t.Fatalf("the rightful session after refusals: %v\n%s", err, tail(string(out)))
	}
	stdin.Close()
}

// One slot (a 16 MiB channel): a second process in the VM is told all channels are in use.
func TestIvshmemInUse(t *testing.T) {
	s, dir := startIvshmemServer(t)
	path := channelFile(t, dir, "inst-vm4")
	waitFree(t, path, 0)
	_, r, goOn := holdOver(t, s, s.token("vm4", "shared", 1<<30), path)
	out, _ := s.ivshmemClient(s.token("vm4b", "shared", 1<<30, func(c *sessiontoken.Claims) { c.InstanceID = "inst-vm4" }),
		path, "probe", "init").CombinedOutput()
	if !strings.Contains(string(out), "has all 1 channels in use by other processes (one session per channel)") || !strings.Contains(string(out), "INIT 100 ") {
		t.Fatalf("second claim:\n%s", tail(string(out)))
	}
	goOn()
	if line, _ := r.ReadString('\n'); line != "INTACT\n" {
		t.Fatalf("the holder after a second process tried: %q", line)
	}
}

// Regions that are not a served channel are refused with the reason, before any claim.
func TestIvshmemBadRegion(t *testing.T) {
	s := startServer(t)
	dir := t.TempDir() // no gpuserverd watches it
	unserved := channelFile(t, dir, "inst-x")
	small := filepath.Join(dir, "small")
	os.WriteFile(small, make([]byte, 8192), 0o600)
	wrongSize := filepath.Join(dir, "wrong-size")
	b := make([]byte, 16<<20)
	binary.LittleEndian.PutUint64(b[ivshmem.HeaderOff:], ivshmem.Magic)
	binary.LittleEndian.PutUint32(b[ivshmem.HeaderOff+8:], ivshmem.Version)
	binary.LittleEndian.PutUint64(b[ivshmem.HeaderOff+16:], 32<<20)
	os.WriteFile(wrongSize, b, 0o600)
	badVersion := filepath.Join(dir, "bad-version")
	binary.LittleEndian.PutUint32(b[ivshmem.HeaderOff+8:], 7)
	os.WriteFile(badVersion, b, 0o600)
	for _, tc := range []struct{ path, want string }{
		{unserved, "has no gpucloud header: gpuserverd does not serve it"},
		{small, "is too small to be a gpucloud channel"},
		{wrongSize, "header's size differs from the region's"},
		{badVersion, "has an unknown header version"},
		{filepath.Join(dir, "absent"), "cannot open the ivshmem channel"},
	} {
		out, _ := s.ivshmemClient(s.token("bad", "shared", 1<<30), tc.path, "probe", "init").CombinedOutput()
		if !strings.Contains(string(out), tc.want) || !strings.Contains(string(out), "INIT 100 ") {
			t.Fatalf("%s: want %q and CUDA_ERROR_NO_DEVICE:\n%s", tc.path, tc.want, tail(string(out)))
		}
	}
	if st, _ := channelState(t, unserved); st != ivshmem.StateUnserved {
		t.Fatalf("an unserved channel was claimed: state %d", st)
	}
}

// ivshmem:auto finds the device by its PCI ids in sysfs (a fake tree here, whose resource2 is
// the channel file).
func TestIvshmemAuto(t *testing.T) {
	s, dir := startIvshmemServer(t)
	path := channelFile(t, dir, "inst-vm5")
	waitFree(t, path, 0)
	sys := t.TempDir()
	for dev, ids := range map[string][2]string{"0000:00:02.0": {"0x1af4", "0x1000"}, "0000:00:03.0": {"0x1af4", "0x1110"}} {
		d := filepath.Join(sys, "bus/pci/devices", dev)
		os.MkdirAll(d, 0o755)
		os.WriteFile(filepath.Join(d, "vendor"), []byte(ids[0]+"\n"), 0o644)
		os.WriteFile(filepath.Join(d, "device"), []byte(ids[1]+"\n"), 0o644)
		if ids[1] == "0x1110" {
			os.Symlink(path, filepath.Join(d, "resource2"))
		}
	}
	cmd := s.ivshmemClient(s.token("vm5", "shared", 1<<30), "auto", "probe", "init")
	cmd.Env = append(cmd.Env, "GPUCLOUD_SYSFS="+sys)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ivshmem channel "+sys+"/bus/pci/devices/0000:00:03.0/resource2") || !strings.Contains(string(out), "INIT 0 ") {
		t.Fatalf("ivshmem:auto: %v\n%s", err, tail(string(out)))
	}
	os.Remove(filepath.Join(sys, "bus/pci/devices/0000:00:03.0/resource2"))
	os.WriteFile(filepath.Join(sys, "bus/pci/devices/0000:00:03.0/device"), []byte("0x1111\n"), 0o644)
	cmd = s.ivshmemClient(s.token("vm5", "shared", 1<<30), "auto", "probe", "init")
	cmd.Env = append(cmd.Env, "GPUCLOUD_SYSFS="+sys)
	if out, _ := cmd.CombinedOutput(); !strings.Contains(string(out), "ivshmem:auto: no ivshmem PCI device (1af4:1110) in sysfs") {
		t.Fatalf("no device:\n%s", tail(string(out)))
	}
}

// holdOver starts probe hold over the channel and returns it once it holds memory.
func holdOver(t *testing.T, s *gpuserverd, token, path string, env ...string) (*exec.Cmd, *bufio.Reader, func()) {
	t.Helper()
	cmd := s.ivshmemClient(token, path, "probe", "hold", "1")
	cmd.Env = append(cmd.Env, env...)
	r, _, send := startHold(t, cmd)
	return cmd, r, func() { send("go\n") }
}

// lostWithin checks the held probe's calls fail (not hang) and it exits within limit.
func lostWithin(t *testing.T, cmd *exec.Cmd, r *bufio.Reader, limit time.Duration) {
	t.Helper()
	start := time.Now()
	hang := time.AfterFunc(limit+10*time.Second, func() { cmd.Process.Kill() })
	defer hang.Stop()
	line, _ := r.ReadString('\n')
	after, _ := r.ReadString('\n')
	err := cmd.Wait()
	if err != nil || !strings.HasPrefix(line, "LOST 999") || after != "AFTER 999 999\n" {
		t.Fatalf("client of a gone server: %v %q %q", err, line, after)
	}
	if took := time.Since(start); took > limit {
		t.Fatalf("the client took %v to see its server gone, over %v", took, limit)
	}
}

// A killed worker: gpuserverd resets the channel and the guest's calls fail at once.
func TestIvshmemKilledWorker(t *testing.T) {
	s, dir := startIvshmemServer(t)
	path := channelFile(t, dir, "inst-vm6")
	gen := waitFree(t, path, 0)
	cmd, r, goOn := holdOver(t, s, s.token("vm6", "shared", 1<<30), path)
	var pids []int
	waitFor(t, "one worker", func() bool { pids = s.workers(); return len(pids) == 1 })
	syscall.Kill(pids[0], syscall.SIGKILL)
	waitFree(t, path, gen)
	goOn()
	lostWithin(t, cmd, r, 2*time.Second)
	waitFor(t, "the usage record", func() bool { return len(s.usage()) == 1 })
}

// A killed gpuserverd (its workers die with it): the heartbeat stops and the guest's calls fail
// within its timeout, not hang.
func TestIvshmemKilledServer(t *testing.T) {
	s, dir := startIvshmemServer(t)
	path := channelFile(t, dir, "inst-vm7")
	waitFree(t, path, 0)
	cmd, r, goOn := holdOver(t, s, s.token("vm7", "shared", 1<<30), path, "GPUCLOUD_IVSHMEM_TIMEOUT_MS=1000")
	s.cmd.Process.Kill()
	goOn()
	lostWithin(t, cmd, r, 4*time.Second)
}

// Two VMs of two tenants on one host, each on its own channel (two slots each) at the same time:
// each session is its tenant's alone, and a tenant's token does not open the other's channel.
func TestIvshmemTwoTenants(t *testing.T) {
	s, dir := startIvshmemServer(t, "--ivshmem-slots", "2")
	paths := map[string]string{"a": channelFileOf(t, dir, "inst-a", 32<<20), "b": channelFileOf(t, dir, "inst-b", 32<<20)}
	for _, p := range paths {
		waitFree(t, p, 0)
	}
	cmds := map[string]*exec.Cmd{}
	for id, p := range paths {
		cmds[id] = s.ivshmemClient(s.token(id, "shared", 1<<30), p, "api_test")
	}
	type result struct {
		id  string
		out []byte
		err error
	}
	done := make(chan result)
	for id, c := range cmds {
		go func() { out, err := c.CombinedOutput(); done <- result{id, out, err} }()
	}
	for range cmds {
		if r := <-done; r.err != nil {
			t.Fatalf("tenant %s: %v\n%s", r.id, r.err, tail(string(r.out)))
		}
	}
	waitFor(t, "two usage records", func() bool { return len(s.usage()) == 2 })
	for _, r := range s.usage() {
		if r.TenantID != "tenant-"+r.SessionID || r.InstanceID != "inst-"+r.SessionID {
			t.Fatalf("record %+v mixes tenants", r)
		}
	}
	gen := waitFree(t, paths["b"], 1)
	// While b's own process holds slot 0, a's token is refused in slot 1.
	_, r, goOn := holdOver(t, s, s.token("b2", "shared", 1<<30, func(c *sessiontoken.Claims) { c.InstanceID = "inst-b" }), paths["b"])
	out, _ := s.ivshmemClient(s.token("a", "shared", 1<<30), paths["b"], "probe", "init").CombinedOutput()
	if !strings.Contains(string(out), `session token is for instance "inst-a", not "inst-b"`) {
		t.Fatalf("tenant a through b's channel:\n%s", tail(string(out)))
	}
	goOn()
	if line, _ := r.ReadString('\n'); line != "INTACT\n" {
		t.Fatalf("b's process beside the refused one: %q", line)
	}
	waitFree(t, paths["b"], gen)
}

// hostd's seed names the VM's channel first and gpuserverd's TCP address after it
// (GPUCLOUD_ENDPOINTS): the library uses the channel, and falls back to TCP when it cannot.
func TestIvshmemSeedEndpoints(t *testing.T) {
	s, dir := startIvshmemServer(t)
	path := channelFile(t, dir, "inst-seed")
	waitFree(t, path, 0)
	unserved := channelFile(t, t.TempDir(), "inst-seed")
	tok := s.token("seed", "shared", 1<<30)
	for _, tc := range []struct{ channel, want string }{
		{path, "gpucloud-trace: ivshmem channel " + path},
		{unserved, "has no gpucloud header"},
	} {
		conf := filepath.Join(t.TempDir(), "guest.conf")
		os.WriteFile(conf, []byte("GPUCLOUD_ENDPOINT=ivshmem:"+tc.channel+"\nGPUCLOUD_ENDPOINTS=ivshmem:"+tc.channel+","+s.addr+
			"\nGPUCLOUD_TOKEN="+tok+"\n"), 0o600)
		cmd := s.client("", "probe", "hold", "1")
		cmd.Env = append(cmd.Env, "GPUCLOUD_ENDPOINT=", "GPUCLOUD_TOKEN=", "GPUCLOUD_CONFIG="+conf, "GPUCLOUD_TRACE=1")
		cmd.Stdin = strings.NewReader("go\n")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), tc.want) || !strings.Contains(string(out), "INTACT") {
			t.Fatalf("seed with %s: %v\n%s", tc.channel, err, tail(string(out)))
		}
		if tc.channel == unserved && (strings.Contains(string(out), "trace: ivshmem channel") || !strings.Contains(string(out), "send LanesOpen")) {
			t.Fatalf("not over TCP after an unserved channel:\n%s", tail(string(out)))
		}
		waitFree(t, path, 0)
	}
}
