package reconcile

import (
	"context"
	"strings"
	"testing"

	"gpucloud/api"
)

// Each VM gets its own host ports from the range (SSH first, then its extra ports), kept in its
// domain so that a restarted hostd neither forgets nor reuses them; a full range fails the VM.
func TestForwardedPortsAllocated(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 0)
	h := e.hostd()
	h.cfg.Ports, h.cfg.PublicHost = PortRange{First: 23000, Last: 23002}, "node1.example"
	a := instance("a1", "tenantA", 0x11)
	a.Spec.ForwardPorts = []int{8888}
	e.cp.Put(a)
	if err := h.Once(ctx); err != nil {
		t.Fatal(err)
	}
	o := e.observed("a1")
	if o.PublicHost != "node1.example" || len(o.Forwards) != 2 || o.Forwards[0] != (api.PortForward{GuestPort: 22, HostPort: 23000}) ||
		o.Forwards[1] != (api.PortForward{GuestPort: 8888, HostPort: 23001}) {
		t.Fatalf("observed %+v", o)
	}
	// A restarted hostd reads the taken ports back from the domains.
	h2 := e.hostd()
	h2.cfg.Ports, h2.cfg.PublicHost = h.cfg.Ports, h.cfg.PublicHost
	e.cp.Put(instance("b1", "tenantB", 0x12))
	c := instance("c1", "tenantB", 0x12)
	e.cp.Put(c)
	_ = h2.Once(ctx)
	if o := e.observed("b1"); len(o.Forwards) != 1 || o.Forwards[0].HostPort != 23002 {
		t.Fatalf("b1 %+v", o)
	}
	if o := e.observed("c1"); o.State != api.ObservedFailed || !strings.Contains(o.Reason, "no free host port") {
		t.Fatalf("c1 with the range full: %+v", o)
	}
	if o := e.observed("a1"); len(o.Forwards) != 2 || o.Forwards[0].HostPort != 23000 {
		t.Fatalf("a1 after the restart %+v", o)
	}
}
