package guesttest

import (
	"fmt"
	"strings"
	"testing"
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
	out := s.shmRun(t, s.token("reg-shm", "shared", 1<<30), "32", "reg_test", "shm")
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
	if strings.Contains(out, "REGTEST writers kept") != strings.Contains(out, "writes held") {
		t.Fatalf("writers checked, but the library did not hold them (or the reverse):\n%s", tail(out))
	}
	after := out[len(before):]
	if !strings.Contains(after, fmt.Sprintf("copy h2d %d bytes: staged", bn)) || strings.Contains(after, fmt.Sprintf("copy h2d %d bytes: one DMA", bn)) {
		t.Fatalf("after unregistering, the range was not pageable again:\n%s", tail(after))
	}
	// The worker saw the guest go (with ranges mapped from its arena until the end) and ended.
	waitFor(t, "the usage record", func() bool { return len(s.usage()) == 1 })
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
