package guesttest

import (
	"fmt"
	"strings"
	"testing"

	"gpucloud/gpuserverd/ivshmem"
	"gpucloud/internal/sessiontoken"
)

// regLine finds the reg_test line starting with prefix and scans its fields into args.
func regLine(t *testing.T, out, prefix string, args ...any) {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			if _, err := fmt.Sscan(strings.TrimPrefix(l, prefix), args...); err != nil {
				t.Fatalf("%q: %v", l, err)
			}
			return
		}
	}
	t.Fatalf("no %q line in:\n%s", prefix, tail(out))
}

// cuMemHostRegister over shared memory: the whole pages of a registered range move into the
// arena (reg_test checks /proc/self/maps and the data itself), and the trace shows its copies
// going as one DMA each while the partial pages at the ends and the ranges that cannot move are
// staged.
func TestHostRegisterShm(t *testing.T) {
	s := startServer(t)
	t.Setenv("GPUCLOUD_DEBUG", "1") // the client inherits it: staged registrations say why
	checkRegTrace(t, s.shmRun(t, s.token("reg-shm", "shared", 1<<30), "32", "reg_test", "shm"))
	// The worker saw the guest go (with ranges mapped from its arena until the end) and ended.
	waitFor(t, "the usage record", func() bool { return len(s.usage()) == 1 })
}

// The same over a VM's ivshmem channel (the host test path: the channel file stands for the
// device's BAR): registered pages are mapped from the channel file at their block's offset in the
// slot, so their copies are one DMA too, and the data survives.
func TestHostRegisterIvshmem(t *testing.T) {
	// In tmpfs, as production's channels: the write-holding on unregistering needs shared memory
	// that userfaultfd can write-protect (a VM's BAR mapping cannot be: README, "Zero-copy in VMs").
	s, dir := startIvshmemServerIn(t, tmpfsDir(t), "--ivshmem-slots", "2")
	path := channelFileOf(t, dir, "inst-reg", 64<<20) // two slots of 32 MiB, as reg_test's arena
	waitFree(t, path, 0)
	_, r, goOn := holdOver(t, s, s.token("reg-hold", "shared", 1<<30, func(c *sessiontoken.Claims) { c.InstanceID = "inst-reg" }), path)
	t.Setenv("GPUCLOUD_DEBUG", "1")
	out, err := s.ivshmemClient(s.token("reg", "shared", 1<<30), path, "reg_test", "ivshmem").CombinedOutput()
	if err != nil {
		t.Fatalf("reg_test over ivshmem:%s: %v\n%s", path, err, tail(string(out)))
	}
	if !strings.Contains(string(out), "slot 1 of 2, 33554432 bytes") || !strings.Contains(string(out), "ivshmem mapping: cached") {
		t.Fatalf("not in slot 1 (slot 0 is held), or the mapping not found cached:\n%s", tail(string(out)))
	}
	checkRegTrace(t, string(out))
	// Where the VM's mapping of the BAR is uncached (its PAT honoured: AMD hosts), pages are not
	// moved into it: every registration is staged, as without an arena, and says why.
	waitFor(t, "slot 1 free", func() bool { st, _ := slotState(t, path, 1, 32<<20); return st == ivshmem.StateFree })
	cmd := s.ivshmemClient(s.token("reg", "shared", 1<<30), path, "reg_test", "tcp")
	cmd.Env = append(cmd.Env, "GPUCLOUD_IVSHMEM_CACHING=uc")
	out, err = cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "reg_test: ok") || strings.Contains(string(out), ": zero-copy ") ||
		!strings.Contains(string(out), "staged (the ivshmem mapping is uncached in this VM") {
		t.Fatalf("reg_test over an uncached mapping: %v\n%s", err, tail(string(out)))
	}
	goOn() // the other slot's process, its memory untouched by the registrations in this one
	if line, _ := r.ReadString('\n'); line != "INTACT\n" {
		t.Fatalf("slot 0's process after slot 1's registrations: %q", line)
	}
	waitFor(t, "three usage records", func() bool { return len(s.usage()) == 3 })
}

// checkRegTrace checks reg_test's output over an arena against the library's trace. With
// writersSkipped, reg_test was told not to check for held writes (REGTEST_NO_WRITERS).
func checkRegTrace(t *testing.T, out string, writersSkipped ...bool) {
	t.Helper()
	if !strings.Contains(out, "reg_test: ok") {
		t.Fatalf("reg_test did not finish:\n%s", tail(out))
	}
	// Before the unregistering, the trace is of the registered ranges' copies.
	before, _, ok := strings.Cut(out, "REGTEST unregistered")
	if !ok {
		t.Fatalf("no end marker:\n%s", tail(out))
	}
	var aPtr, bPtr string
	var an, bn, interior, head, tailN int
	regLine(t, out, "REGTEST aligned ", &aPtr, &an)
	regLine(t, out, "REGTEST unaligned ", &bPtr, &bn, new(string), &interior, new(string), &head, new(string), &tailN)
	for _, want := range []string{
		fmt.Sprintf("cuMemHostRegister %s+%d flags 0x1: zero-copy %s+%d at arena offset", aPtr, an, aPtr, an),
		fmt.Sprintf("copy h2d %d bytes: one DMA", an),              // registered -> device
		fmt.Sprintf("copy d2h %d bytes: one DMA", an),              // device -> registered
		fmt.Sprintf("copy h2d %d bytes: staged", an),               // the pageable side
		fmt.Sprintf("copy h2d %d bytes: one DMA", interior),        // the unaligned range's whole pages...
		fmt.Sprintf("copy h2d %d bytes: staged in 1 chunks", head), // ...its partial first page
		fmt.Sprintf("copy h2d %d bytes: staged in 1 chunks", tailN),
		"staged (not private anonymous read-write memory)", // the file and read-only mappings
		"staged (the arena is full)",                       // 24 MiB
		"staged (no whole page in the range)",              // 100 bytes
		"gpucloud: cuMemHostRegister",                      // GPUCLOUD_DEBUG's line
		"not zero-copy (the arena is full); its copies are staged",
	} {
		if !strings.Contains(before, want) {
			t.Errorf("trace lacks %q", want)
		}
	}
	if t.Failed() {
		t.Fatalf("trace:\n%s", tail(before))
	}
	// Where the process may use userfaultfd, other threads' writes were held while pages moved,
	// and reg_test saw none lost.
	if len(writersSkipped) == 0 && strings.Contains(out, "REGTEST writers kept") != strings.Contains(out, "writes held") {
		t.Fatalf("writers checked, but the library did not hold them (or the reverse):\n%s", tail(out))
	}
	after := out[len(before):]
	if !strings.Contains(after, fmt.Sprintf("copy h2d %d bytes: staged", bn)) || strings.Contains(after, fmt.Sprintf("copy h2d %d bytes: one DMA", bn)) {
		t.Fatalf("after unregistering, the range was not pageable again:\n%s", tail(after))
	}
}

// Without an arena (TCP) every registration is staged: the same program, the same results.
func TestHostRegisterTCP(t *testing.T) {
	s := startServer(t)
	cmd := s.client(s.token("reg-tcp", "shared", 1<<30), "reg_test", "tcp")
	cmd.Env = append(cmd.Env, "GPUCLOUD_TRACE=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "reg_test: ok") {
		t.Fatalf("reg_test tcp: %v\n%s", err, tail(string(out)))
	}
	if strings.Contains(string(out), "zero-copy") || !strings.Contains(string(out), "staged (no shared arena)") {
		t.Fatalf("registrations over TCP not staged:\n%s", tail(string(out)))
	}
}
