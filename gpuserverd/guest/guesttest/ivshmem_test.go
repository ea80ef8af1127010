package guesttest

import (
	"crypto/ed25519"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"gpucloud/gpuserverd/ivshmem"
)

// A VM's ivshmem channel, without the VM: the guest library maps the channel file itself (as a
// VM maps the device's BAR 2 through sysfs), and gpuserverd serves the file from --ivshmem-dir.

// channelFile creates an instance's channel file in dir as hostd does: 0600, 16 MiB.
func channelFile(t *testing.T, dir, instance string) string {
	t.Helper()
	path := filepath.Join(dir, ivshmem.FilePrefix+instance)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(16 << 20); err != nil {
		t.Fatal(err)
	}
	return path
}

// channelState reads the channel header's state and generation from the file.
func channelState(t *testing.T, path string) (state, gen uint32) {
	t.Helper()
	b := make([]byte, 32)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.ReadAt(b, ivshmem.HeaderOff); err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint32(b[12:]), binary.LittleEndian.Uint32(b[24:])
}

// startIvshmemServer starts gpuserverd serving channel files in a new directory.
func startIvshmemServer(t *testing.T, extra ...string) (*gpuserverd, string) {
	t.Helper()
	dir := t.TempDir()
	pub, priv, _ := ed25519.GenerateKey(nil)
	s := startServerOn(t, t.TempDir(), pub, priv, append([]string{"--ivshmem-dir", dir}, extra...))
	return s, dir
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
