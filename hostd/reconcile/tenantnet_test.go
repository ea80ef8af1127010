package reconcile

import (
	"context"
	"testing"

	"libvirt.org/go/libvirtxml"

	"gpucloud/api"
	"gpucloud/hostd/virt"
)

// With per-tenant networking, each tenant's VMs join that tenant's own network (made and started
// by hostd, once per tenant), and each NIC carries the tenant filter with its tenant's subnet and
// its own GPU server's data port. (The test driver has no nwfilter: the rules themselves are
// checked in virt.)
func TestTenantsGetSeparateFilteredNetworks(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 0)
	e.net = virt.Network{Kind: "tenant"}
	h := e.hostd()
	a1, a2, b1 := instance("a1", "tenantA", 0x11), instance("a2", "tenantA", 0x11), instance("b1", "tenantB", 0x22)
	b1.GPU.Endpoints = []string{"192.0.2.7:7100"}
	e.cp.Put(a1)
	e.cp.Put(a2)
	e.cp.Put(b1)
	if err := h.Once(ctx); err != nil {
		t.Fatal(err)
	}
	nic := func(id string) libvirtxml.DomainInterface {
		t.Helper()
		x, err := e.hv.XML(virt.DomainName(id))
		if err != nil {
			t.Fatal(err)
		}
		var d libvirtxml.Domain
		if err := d.Unmarshal(x); err != nil {
			t.Fatal(err)
		}
		if len(d.Devices.Interfaces) != 1 {
			t.Fatalf("%s NICs %+v", id, d.Devices.Interfaces)
		}
		return d.Devices.Interfaces[0]
	}
	params := func(n libvirtxml.DomainInterface) map[string]string {
		out := map[string]string{}
		if n.FilterRef == nil || n.FilterRef.Filter != virt.TenantFilter {
			t.Fatalf("NIC without the tenant filter: %+v", n.FilterRef)
		}
		for _, p := range n.FilterRef.Parameters {
			out[p.Name] = p.Value
		}
		return out
	}
	for id, want := range map[string]struct{ net, subnet, gpuIP, gpuPort string }{
		"a1": {"gpucloud-net-17", "10.128.17.0", "10.1.0.1", "7000"},
		"a2": {"gpucloud-net-17", "10.128.17.0", "10.1.0.1", "7000"},
		"b1": {"gpucloud-net-34", "10.128.34.0", "192.0.2.7", "7100"},
	} {
		n := nic(id)
		p := params(n)
		if n.Source.Network == nil || n.Source.Network.Network != want.net || p["SUBNET"] != want.subnet ||
			p["GPU_IP"] != want.gpuIP || p["GPU_PORT"] != want.gpuPort {
			t.Errorf("%s: network %+v filter %v, want %+v", id, n.Source.Network, p, want)
		}
	}
	for _, name := range []string{"gpucloud-net-17", "gpucloud-net-34"} {
		active, err := e.hv.NetworkActive(name)
		if err != nil || !active {
			t.Errorf("network %s active %v %v", name, active, err)
		}
	}
	if err := h.Once(ctx); err != nil { // converged: networks exist, nothing is redone
		t.Fatal(err)
	}
	// Tenant B's last VM goes, and its network with it; A's stays while a2 is left.
	e.cp.SetDesired("b1", api.DesiredDeleted)
	e.cp.SetDesired("a1", api.DesiredDeleted)
	if err := h.Once(ctx); err != nil {
		t.Fatal(err)
	}
	keys, err := e.hv.TenantNetworks()
	if err != nil || len(keys) != 1 || keys[0] != 0x11 {
		t.Fatalf("tenant networks after B left: %v %v, want [17]", keys, err)
	}
	e.cp.SetDesired("a2", api.DesiredDeleted)
	if err := h.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if keys, err := e.hv.TenantNetworks(); err != nil || len(keys) != 0 {
		t.Fatalf("tenant networks after the last VM left: %v %v", keys, err)
	}
	if _, err := e.hv.NetworkActive("gpucloud-net-17"); err == nil {
		t.Error("network gpucloud-net-17 still defined")
	}
}
