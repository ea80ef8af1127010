package worker

import (
	"maps"
	"testing"
)

// TestStatsByDevice: memory is counted per GPU as well as in total, and a GPU whose memory is all
// freed drops out of the snapshot (guests' NVML reads a session's use of each GPU from it).
func TestStatsByDevice(t *testing.T) {
	st := newStats()
	st.memory(0, 100)
	st.memory(2, 40)
	st.memory(0, 5)
	snap := st.Snapshot()
	if want := map[int]uint64{0: 105, 2: 40}; !maps.Equal(snap.DeviceBytes, want) || snap.MemoryBytes != 145 {
		t.Fatalf("snapshot %+v, want devices %v and 145 in all", snap, want)
	}
	st.memory(2, -40)
	snap = st.Snapshot()
	if want := map[int]uint64{0: 105}; !maps.Equal(snap.DeviceBytes, want) || snap.MemoryPeakBytes != 145 {
		t.Fatalf("after freeing GPU 2: %+v, want devices %v, peak 145", snap, want)
	}
}
