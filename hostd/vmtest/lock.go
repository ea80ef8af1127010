package vmtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// LockSystemLibvirt holds a machine-wide lock on qemu:///system until the test ends. hostd owns
// every gpucloud-* domain it finds there and removes those it was not given, which is right for
// one hostd per host but means two real-VM tests of different packages (which go test runs at the
// same time) would delete each other's VMs ("domain not found"). The lock is a file, so it holds
// across the test processes of one go test run.
func LockSystemLibvirt(t testing.TB) {
	t.Helper()
	unlock, err := lockFile(context.Background(), filepath.Join(os.TempDir(), "gpucloud-qemu-system.lock"))
	if err != nil {
		t.Fatalf("vmtest: lock qemu:///system for this test: %v", err)
	}
	t.Cleanup(unlock)
}

// lockFile holds an exclusive lock on path (created) until unlock, across processes; it gives up
// when ctx ends.
func lockFile(ctx context.Context, path string) (unlock func(), err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("vmtest: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("vmtest: %w", err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
		}
		if err != syscall.EWOULDBLOCK {
			f.Close()
			return nil, fmt.Errorf("vmtest: locking %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("vmtest: waiting for %s: %w", path, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
