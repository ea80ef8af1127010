package guesttest

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"gpucloud/gpuserverd/ivshmem"
	"gpucloud/internal/sessiontoken"
)

// slotState reads slot i's state and generation from a channel file split into slots of size bytes.
func slotState(t *testing.T, path string, i int, size int64) (state, gen uint32) {
	t.Helper()
	b := make([]byte, 32)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.ReadAt(b, int64(i)*size+ivshmem.HeaderOff); err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint32(b[12:]), binary.LittleEndian.Uint32(b[24:])
}

// Several processes in one VM at once: a 64 MiB channel split into four 16 MiB slots serves four
// sessions together, each in a slot of its own with its memory untouched by the others'. A fifth
// process is told all are in use and, with the seed's endpoint list, goes on over TCP. A killed
// process's slot is claimable again once its heartbeat has stood still for the peer timeout.
func TestIvshmemSlots(t *testing.T) {
	const slot = 16 << 20
	s, dir := startIvshmemServer(t, "--ivshmem-slots", "4", "--ivshmem-peer-timeout", "1s")
	path := channelFileOf(t, dir, "inst-multi", 4*slot)
	waitFor(t, "four free slots", func() bool {
		for i := range 4 {
			if st, _ := slotState(t, path, i, slot); st != ivshmem.StateFree {
				return false
			}
		}
		return true
	})
	tok := func(session string) string {
		return s.token(session, "shared", 1<<30, func(c *sessiontoken.Claims) { c.InstanceID = "inst-multi" })
	}
	type holder struct {
		cmd  *exec.Cmd
		read func() string
		goOn func()
	}
	var held []holder
	for i := range 4 {
		cmd, r, goOn := holdOver(t, s, tok(fmt.Sprintf("multi%d", i)), path)
		held = append(held, holder{cmd, func() string { l, _ := r.ReadString('\n'); return l }, goOn})
	}
	for i := range 4 {
		if st, _ := slotState(t, path, i, slot); st != ivshmem.StateClaimed {
			t.Fatalf("slot %d: state %d with four processes holding sessions", i, st)
		}
	}
	if n := len(s.workers()); n != 4 {
		t.Fatalf("%d workers for four slots", n)
	}

	out, _ := s.ivshmemClient(tok("multi-fifth"), path, "probe", "init").CombinedOutput()
	if !strings.Contains(string(out), "has all 4 channels in use by other processes") || !strings.Contains(string(out), "INIT 100 ") {
		t.Fatalf("fifth process:\n%s", tail(string(out)))
	}
	conf := filepath.Join(t.TempDir(), "guest.conf")
	os.WriteFile(conf, []byte("GPUCLOUD_ENDPOINTS=ivshmem:"+path+","+s.addr+"\nGPUCLOUD_TOKEN="+tok("multi-tcp")+"\n"), 0o600)
	cmd := s.client("", "probe", "hold", "1")
	cmd.Env = append(cmd.Env, "GPUCLOUD_ENDPOINT=", "GPUCLOUD_TOKEN=", "GPUCLOUD_CONFIG="+conf, "GPUCLOUD_TRACE=1")
	cmd.Stdin = strings.NewReader("go\n")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "has all 4 channels in use") || !strings.Contains(string(out), "send LanesOpen") ||
		!strings.Contains(string(out), "INTACT") {
		t.Fatalf("fifth process with the seed's endpoints, not over TCP: %v\n%s", err, tail(string(out)))
	}

	// Killed without letting its slot go: the slot comes back after the peer timeout.
	held[0].cmd.Process.Signal(syscall.SIGKILL)
	held[0].cmd.Wait()
	freed := -1
	waitFor(t, "the killed process's slot free again", func() bool {
		for i := range 4 {
			if st, gen := slotState(t, path, i, slot); st == ivshmem.StateFree && gen > 1 {
				freed = i
				return true
			}
		}
		return false
	})
	out, err = s.ivshmemClient(tok("multi-again"), path, "probe", "init").CombinedOutput()
	if want := fmt.Sprintf("slot %d of 4", freed); err != nil || !strings.Contains(string(out), want) || !strings.Contains(string(out), "INIT 0 ") {
		t.Fatalf("a new process, want %q: %v\n%s", want, err, tail(string(out)))
	}
	for _, h := range held[1:] {
		h.goOn()
		if line := h.read(); line != "INTACT\n" {
			t.Fatalf("a holder after the others' sessions: %q", line)
		}
	}
	waitFor(t, "every slot free", func() bool {
		for i := range 4 {
			if st, _ := slotState(t, path, i, slot); st != ivshmem.StateFree {
				return false
			}
		}
		return true
	})

	// The API suite in four processes at once, one per slot.
	type result struct {
		out []byte
		err error
	}
	done := make(chan result)
	for i := range 4 {
		c := s.ivshmemClient(tok(fmt.Sprintf("multi-api%d", i)), path, "api_test")
		go func() { out, err := c.CombinedOutput(); done <- result{out, err} }()
	}
	for range 4 {
		if r := <-done; r.err != nil || !strings.Contains(string(r.out), "send MemcpyHtoDShm") {
			t.Fatalf("api_test in a slot: %v\n%s", r.err, tail(string(r.out)))
		}
	}
	// Sessions: four holders, the TCP one, the killed one's successor, four API suites.
	waitFor(t, "every session's usage record", func() bool { return len(s.usage()) == 10 })
	for _, r := range s.usage() {
		if r.InstanceID != "inst-multi" || r.TenantID != "tenant-"+r.SessionID {
			t.Fatalf("record %+v", r)
		}
	}
}
