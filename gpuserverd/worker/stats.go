package worker

import (
	"sync"
	"time"
)

// Stats is what a session has used, for its usage record.
type Stats struct {
	mu         sync.Mutex
	start      time.Time
	last       time.Time
	current    uint64
	peak       uint64
	byteSecs   float64 // integral of memory held over time
	bytesMoved uint64
}

// Snapshot is Stats at one moment, as the worker reports it to the server.
type Snapshot struct {
	MemoryBytes     uint64 `json:"memory_bytes"`
	MemoryPeakBytes uint64 `json:"memory_peak_bytes"`
	MemoryAvgBytes  uint64 `json:"memory_avg_bytes"`
	BytesMoved      uint64 `json:"bytes_moved"`
}

func newStats() *Stats {
	now := time.Now()
	return &Stats{start: now, last: now}
}

func (st *Stats) advance(now time.Time) {
	st.byteSecs += float64(st.current) * now.Sub(st.last).Seconds()
	st.last = now
}

func (st *Stats) memory(delta int64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.advance(time.Now())
	st.current = uint64(int64(st.current) + delta)
	st.peak = max(st.peak, st.current)
}

func (st *Stats) moved(n int) {
	st.mu.Lock()
	st.bytesMoved += uint64(n)
	st.mu.Unlock()
}

func (st *Stats) end() { st.memory(0) }

// Snapshot returns the figures so far.
func (st *Stats) Snapshot() Snapshot {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.advance(time.Now())
	avg := uint64(0)
	if d := st.last.Sub(st.start).Seconds(); d > 0 {
		avg = uint64(st.byteSecs / d)
	}
	return Snapshot{MemoryBytes: st.current, MemoryPeakBytes: st.peak, MemoryAvgBytes: avg, BytesMoved: st.bytesMoved}
}
