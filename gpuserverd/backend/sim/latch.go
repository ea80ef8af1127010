package sim

import (
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"gpucloud/gpuserverd/backend"
)

// latchWait is the simulated backend's one kernel that waits for the host while it runs, as a
// GPU kernel spinning on a flag in pinned memory does (UnifiedMemoryPerf's latch). It exists so
// that CI can show a CPU write reaching a running kernel, and the kernel's own writes surviving
// it (the guest's coherence over TCP, driver/coh_twin.c):
//
//	latch_wait(unsigned *latch, unsigned *out, unsigned long long delay_ns)
//
// sleeps delay_ns (at most 10 s), sets out[0] = 0xA11CE, waits until latch[0] != 0 and then
// until latch[1] != 0, and sets out[1] = latch[0] + latch[1]. A latch still 0 after latchTimeout
// fails the launch, so that a broken test ends. Other streams' work runs meanwhile: each stream
// has its own goroutine (stream.go).
func latchWait(c *Context, _ backend.LaunchConfig, p args) error {
	latch, err1 := c.floats(p.u64(0), 2)
	out, err2 := c.floats(p.u64(8), 2)
	if err := firstErr(err1, err2); err != nil {
		return err
	}
	time.Sleep(time.Duration(min(p.u64(16), uint64(10*time.Second))))
	word(out, 0).Store(0xA11CE)
	deadline := time.Now().Add(latchTimeout)
	for i := range 2 {
		for word(latch, i).Load() == 0 {
			if time.Now().After(deadline) {
				return fmt.Errorf("latch_wait: latch[%d] still 0 after %v: %w", i, latchTimeout, backend.ErrLaunchFailed)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	word(out, 1).Store(word(latch, 0).Load() + word(latch, 1).Load())
	return nil
}

const latchTimeout = 30 * time.Second

// word is the i-th 32-bit word of b, read and written atomically: a copy on another stream may
// write it meanwhile. The views the sim hands out come from 8-byte aligned allocations.
func word(b []byte, i int) *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(&b[4*i])) }
