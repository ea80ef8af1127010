package sim

import (
	"testing"

	"gpucloud/gpuserverd/backend"
)

// Hostile sizes whose work would wrap 64 bits are refused as too much work, never queued.
func TestBlasSolveWorkDoesNotWrap(t *testing.T) {
	c := newContext(New(1, 1<<20), 0)
	h, err := c.BlasCreate()
	if err != nil {
		t.Fatal(err)
	}
	big := int32(1 << 30)
	for name, err := range map[string]error{
		"trsm":  c.BlasTrsm(backend.Trsm{Handle: h, M: big, N: big, LdA: big, LdB: big, A: 1, B: 1}),
		"getrf": c.BlasGetrfBatched(backend.GetrfBatched{Handle: h, N: big, LdA: big, A: 1, Info: 1, Batch: 1 << 24}),
		"getrs": c.BlasGetrsBatched(backend.GetrsBatched{Handle: h, N: big, NRHS: big, LdA: big, LdB: big, A: 1, B: 1, Batch: 1 << 24}),
	} {
		if backend.BlasStatusOf(err) != backend.BlasNotSupported {
			t.Errorf("%s: %v, want CUBLAS_STATUS_NOT_SUPPORTED (too much work)", name, err)
		}
	}
}
