package reconcile

import (
	"context"
	"testing"
)

// BenchmarkSteadyPass measures one reconcile pass over a host whose 8 VMs (each with a VF) are
// already as wanted: the cost hostd pays every interval, all of it reading libvirt, files and
// the control plane (the fake, over loopback HTTP).
func BenchmarkSteadyPass(b *testing.B) {
	e := newEnv(b, 8)
	h := e.hostd()
	for _, id := range ids(8) {
		e.cp.Put(instance(id, "t-"+id, 0x30))
	}
	ctx := context.Background()
	if err := h.Once(ctx); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if err := h.Once(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
