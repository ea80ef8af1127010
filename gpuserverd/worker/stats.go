package worker

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
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
	byDevice   map[int]uint64 // memory held on each GPU, by backend ordinal
	guestPID   uint32
	migration  *MigrationProgress
	handOff    time.Time // the session moved to another server at this time
	pausedAt   time.Time // a migration paused the session here to hand it off (zero: none under way)
	awaySince  time.Time // the guest's stream broke (or a restore awaits it) at this time (zero: attached)
	billFrom   time.Time // a restored session: its server bills it from here
	control    *ControlResult
	resumeKey  string
	laneKey    string
}

// Snapshot is Stats at one moment, as the worker reports it to the server.
type Snapshot struct {
	MemoryBytes     uint64 `json:"memory_bytes"`
	MemoryPeakBytes uint64 `json:"memory_peak_bytes"`
	MemoryAvgBytes  uint64 `json:"memory_avg_bytes"`
	BytesMoved      uint64 `json:"bytes_moved"`
	// DeviceBytes is MemoryBytes by GPU (backend ordinal): what the guests' NVML reports as the
	// instance's use of each GPU on the shared tier.
	DeviceBytes map[int]uint64 `json:"device_bytes,omitempty"`
	// GuestPID is the guest program's process id, as its libcuda told it (0: not told).
	GuestPID uint32 `json:"guest_pid,omitempty"`
	// Migration is the last migration's progress (nil: none was tried).
	Migration *MigrationProgress `json:"migration,omitempty"`
	// HandedOff is when the session moved to another server: it is billed here up to then.
	HandedOff time.Time `json:"handed_off,omitzero"`
	// PausedAt is when a migration under way paused the session to hand it to another server,
	// which bills it from then if the move succeeds: until the move's outcome, this server bills
	// nothing past it (the server's view of a worker lags its reports, and a gpuserverd that
	// adopted the worker mid-move knows of no move at all).
	PausedAt time.Time `json:"paused_at,omitzero"`
	// AwaySince is when the guest's stream broke (a restored session: since it went live here),
	// while the worker waits for the guest to resume: the time away is billed only once the guest
	// is back, so a guest that never returns (its process died; another may already run) is
	// billed up to the break.
	AwaySince time.Time `json:"away_since,omitzero"`
	// At is when the worker took this snapshot: it vouches for nothing later.
	At time.Time `json:"at,omitzero"`
	// BillFrom is set by a restored session (a checkpoint's restore, a migration's target): it
	// is billed from then, and not before it is set.
	BillFrom time.Time `json:"bill_from,omitzero"`
	// Control is the last control request's outcome (control.go).
	Control *ControlResult `json:"control,omitempty"`
	// ResumeKey names the guest's resume secret without revealing it (ResumeKeyOf): the server
	// routes a Resume to the worker whose key it matches, among sessions sharing an id (an
	// instance's several processes).
	ResumeKey string `json:"resume_key,omitempty"`
	// LaneKey names the session's lane key likewise (ResumeKeyOf of it): the server routes a
	// LaneHello to the worker that issued its key.
	LaneKey string `json:"lane_key,omitempty"`
}

// ResumeKeyOf is the key a worker reports for a resume secret.
func ResumeKeyOf(secret []byte) string {
	h := sha256.Sum256(secret)
	return hex.EncodeToString(h[:8])
}

func (st *Stats) setResumeKey(secret []byte) {
	st.mu.Lock()
	st.resumeKey = ResumeKeyOf(secret)
	st.mu.Unlock()
}

func (st *Stats) setLaneKey(key []byte) {
	st.mu.Lock()
	st.laneKey = ResumeKeyOf(key)
	st.mu.Unlock()
}

func (st *Stats) setControl(r ControlResult) {
	st.mu.Lock()
	st.control = &r
	st.mu.Unlock()
}

func (st *Stats) setMigration(p MigrationProgress) {
	st.mu.Lock()
	st.migration = &p
	st.mu.Unlock()
}

func (st *Stats) handedOff(t time.Time) {
	st.mu.Lock()
	st.handOff = t
	st.mu.Unlock()
}

// pausing notes that a migration paused the session at t (zero: the move failed, it runs on).
func (st *Stats) pausing(t time.Time) {
	st.mu.Lock()
	st.pausedAt = t
	st.mu.Unlock()
}

// away notes that the guest went away at t, unless it already was.
func (st *Stats) away(t time.Time) {
	st.mu.Lock()
	if st.awaySince.IsZero() {
		st.awaySince = t
	}
	st.mu.Unlock()
}

// back notes that the guest resumed its stream.
func (st *Stats) back() {
	st.mu.Lock()
	st.awaySince = time.Time{}
	st.mu.Unlock()
}

// setBillFrom marks a restored session live from t.
func (st *Stats) setBillFrom(t time.Time) {
	st.mu.Lock()
	st.billFrom = t
	st.mu.Unlock()
}

func newStats() *Stats {
	now := time.Now()
	return &Stats{start: now, last: now, byDevice: map[int]uint64{}}
}

func (st *Stats) advance(now time.Time) {
	st.byteSecs += float64(st.current) * now.Sub(st.last).Seconds()
	st.last = now
}

// memory adds delta bytes held on the GPU with backend ordinal ordinal.
func (st *Stats) memory(ordinal int, delta int64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.advance(time.Now())
	st.current = uint64(int64(st.current) + delta)
	st.peak = max(st.peak, st.current)
	if b := uint64(int64(st.byDevice[ordinal]) + delta); b != 0 {
		st.byDevice[ordinal] = b
	} else {
		delete(st.byDevice, ordinal)
	}
}

func (st *Stats) setGuestPID(pid uint32) {
	st.mu.Lock()
	st.guestPID = pid
	st.mu.Unlock()
}

func (st *Stats) moved(n int) {
	st.mu.Lock()
	st.bytesMoved += uint64(n)
	st.mu.Unlock()
}

func (st *Stats) end() {
	st.mu.Lock()
	st.advance(time.Now())
	st.mu.Unlock()
}

// Snapshot returns the figures so far.
func (st *Stats) Snapshot() Snapshot {
	st.mu.Lock()
	defer st.mu.Unlock()
	now := time.Now()
	st.advance(now)
	avg := uint64(0)
	if d := st.last.Sub(st.start).Seconds(); d > 0 {
		avg = uint64(st.byteSecs / d)
	}
	var byDevice map[int]uint64
	if len(st.byDevice) > 0 {
		byDevice = maps.Clone(st.byDevice)
	}
	return Snapshot{MemoryBytes: st.current, MemoryPeakBytes: st.peak, MemoryAvgBytes: avg, BytesMoved: st.bytesMoved,
		DeviceBytes: byDevice, GuestPID: st.guestPID, Migration: st.migration, HandedOff: st.handOff, PausedAt: st.pausedAt, AwaySince: st.awaySince, At: now.UTC(),
		BillFrom: st.billFrom, Control: st.control, ResumeKey: st.resumeKey, LaneKey: st.laneKey}
}

// BillableUntil is end, or the earliest time before it past which this server may not bill the
// session yet: its hand-off to another server, a migration's pause, its guest's absence.
func (sn Snapshot) BillableUntil(end time.Time) time.Time {
	for _, t := range []time.Time{sn.HandedOff, sn.PausedAt, sn.AwaySince} {
		if !t.IsZero() && t.Before(end) {
			end = t
		}
	}
	return end
}
