package server

import (
	"errors"
	"log/slog"
	"net"
	"sync"

	"gpucloud/gpuserverd/worker"
	"gpucloud/internal/sessiontoken"
)

// A shared-tier token's memory quota is the instance's, per GPU: placement reserved that much
// of the GPU for the instance, not for each of its VM's processes (issue 13, finding 3). Each
// session is its own worker process, so the server keeps the books: before allocating, a worker
// reserves the bytes over a socket pair (its fd worker.MemoryFD), after freeing gives them back,
// and when it exits, however it exits (SIGKILL included), the server drops what it held.

// memKey is an instance's share of one GPU.
type memKey struct{ instance, gpu string }

// memoryLedger is the device memory each instance's sessions hold, per GPU.
type memoryLedger struct {
	mu   sync.Mutex
	used map[memKey]uint64
	held map[int]map[memKey]uint64 // by worker pid
}

func newMemoryLedger() *memoryLedger {
	return &memoryLedger{used: map[memKey]uint64{}, held: map[int]map[memKey]uint64{}}
}

// change applies delta bytes of pid's session to k under quota: a reservation that would take
// the instance past quota is refused; a give-back is never more than the session held. used is
// the instance's total on that GPU afterwards.
func (l *memoryLedger) change(pid int, k memKey, quota uint64, delta int64) (ok bool, used uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	held := l.held[pid]
	if held == nil {
		held = map[memKey]uint64{}
		l.held[pid] = held
	}
	switch {
	case delta > 0:
		n := uint64(delta)
		if n > quota || l.used[k] > quota-n {
			return false, l.used[k]
		}
		l.used[k] += n
		held[k] += n
	case delta < 0:
		n := min(uint64(-delta), held[k])
		l.used[k] -= n
		held[k] -= n
	}
	used = l.used[k]
	if held[k] == 0 {
		delete(held, k)
	}
	if used == 0 {
		delete(l.used, k)
	}
	return true, used
}

// drop gives back everything pid's session held (its worker has exited).
func (l *memoryLedger) drop(pid int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, n := range l.held[pid] {
		if l.used[k] -= n; l.used[k] == 0 {
			delete(l.used, k)
		}
	}
	delete(l.held, pid)
}

// instanceBytes is what instance holds on gpu.
func (l *memoryLedger) instanceBytes(instance, gpu string) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.used[memKey{instance, gpu}]
}

// serveMemory answers one worker's ledger requests until it closes its end. A malformed request
// ends the conversation (the worker is ours: that is a bug); its allocations then fail.
func (s *Server) serveMemory(c *net.UnixConn, pid int, claims sessiontoken.Claims, log *slog.Logger) {
	buf := make([]byte, 64)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return
		}
		dev, delta, err := worker.DecodeMemoryRequest(buf[:n])
		if err == nil && int(dev) >= len(claims.GPUs) {
			err = errBadDevice
		}
		if err != nil {
			log.Warn("instance memory ledger: malformed request from the worker", "err", err)
			return
		}
		ok, used := s.memory.change(pid, memKey{claims.InstanceID, claims.GPUs[dev]}, claims.MemoryQuota, delta)
		if !ok {
			log.Info("allocation past the instance's quota", "bytes", delta, "instance_holds", used, "quota", claims.MemoryQuota)
		}
		if _, err := c.Write(worker.EncodeMemoryReply(ok, used)); err != nil {
			return
		}
	}
}

var errBadDevice = errors.New("device index past the session's GPUs")

// move hands up to n bytes pid's session holds on k to holder to (an exported object's entry in
// the IPC registry, ipc.go): the instance's total is unchanged, and the bytes go when to is
// dropped rather than with pid.
func (l *memoryLedger) move(pid, to int, k memKey, n uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	from := l.held[pid]
	n = min(n, from[k])
	if n == 0 {
		return
	}
	if from[k] -= n; from[k] == 0 {
		delete(from, k)
	}
	if l.held[to] == nil {
		l.held[to] = map[memKey]uint64{}
	}
	l.held[to][k] += n
}
