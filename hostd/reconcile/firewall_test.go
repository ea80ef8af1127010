package reconcile

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"gpucloud/api"
	"gpucloud/hostd/tenantfw"
	"gpucloud/hostd/tenantfw/netnstest"
	"gpucloud/hostd/virt"
)

// hostd keeps its nftables table in step with the tenants it runs VMs for: both tenants' bridges
// and data ports after the first pass, the table restored after someone flushes it, a tenant's
// rules gone with its last VM, and the table gone with the last tenant. nft runs for real, in a
// network namespace of the test's own.
func TestFirewallFollowsTenants(t *testing.T) {
	netnstest.Require(t)
	ctx := context.Background()
	ns := netnstest.Add(t, "gpc-hostd")
	e := newEnv(t, 0)
	e.net = virt.Network{Kind: "tenant"}
	e.fw = &tenantfw.Firewall{Command: []string{"ip", "netns", "exec", ns, "nft"}}
	h := e.hostd()
	a1, b1 := instance("a1", "tenantA", 0x11), instance("b1", "tenantB", 0x22)
	b1.GPU.Endpoints = []string{"192.0.2.7:7100", "10.128.17.9:22"} // the second one is inside A's network
	e.cp.Put(a1)
	e.cp.Put(b1)
	if err := h.Once(ctx); err != nil {
		t.Fatal(err)
	}
	listing := func() string {
		t.Helper()
		l, err := e.fw.Listing(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	first := listing()
	for _, want := range []string{
		`iifname "gpcbr17" ip daddr 10.1.0.1 tcp dport 7000 accept`,
		`iifname "gpcbr34" ip daddr 192.0.2.7 tcp dport 7100 accept`,
		`iifname "gpcbr34" oifname != "gpcbr34"`,
	} {
		if !strings.Contains(first, want) {
			t.Errorf("no %q in\n%s", want, first)
		}
	}
	if strings.Contains(first, "10.128.17.9") {
		t.Errorf("an endpoint inside A's network was let through:\n%s", first)
	}

	netnstest.Exec(t, ns, "nft", "flush", "table", "inet", tenantfw.Table)
	if err := h.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if got := listing(); got != first {
		t.Errorf("flushed table not restored:\n%s\nwant\n%s", got, first)
	}

	e.cp.SetDesired("b1", api.DesiredDeleted)
	if err := h.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if got := listing(); strings.Contains(got, "gpcbr34") || !strings.Contains(got, "gpcbr17") {
		t.Errorf("after B's last VM went:\n%s", got)
	}
	e.cp.Forget("b1")
	e.cp.SetDesired("a1", api.DesiredDeleted)
	if err := h.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if got := listing(); got != "" {
		t.Errorf("table left after the last tenant went:\n%s", got)
	}
}

// When the firewall cannot be applied, hostd starts nothing: a VM never runs on a tenant
// network its rules do not cover.
func TestFirewallFailureStartsNoVM(t *testing.T) {
	e := newEnv(t, 0)
	e.net = virt.Network{Kind: "tenant"}
	e.fw = &tenantfw.Firewall{Command: []string{"false"}} // nft that always fails
	h := e.hostd()
	e.cp.Put(instance("a1", "tenantA", 0x11))
	err := h.Once(context.Background())
	if err == nil || !strings.Contains(err.Error(), "host firewall") {
		t.Fatalf("pass error %v, want the firewall's", err)
	}
	if d := e.domains(); len(d) != 0 {
		t.Errorf("domains defined without a firewall: %v", d)
	}
}

// With user-mode networking and QEMU's user known, hostd filters that user's sockets: the data
// port a guest reaches at 10.0.2.2 is allowed on the host's loopback, nothing else of it.
func TestFirewallUserMode(t *testing.T) {
	netnstest.Require(t)
	ctx := context.Background()
	ns := netnstest.Add(t, "gpc-hostdu")
	e := newEnv(t, 0)
	e.fw = &tenantfw.Firewall{Command: []string{"ip", "netns", "exec", ns, "nft"}}
	e.qemuUID, e.qemuGID = 64055, 64055
	h := e.hostd()
	a1 := instance("a1", "tenantA", 0x11)
	a1.GPU.Endpoints = []string{"10.0.2.2:7000"}
	e.cp.Put(a1)
	if err := h.Once(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := e.fw.Listing(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"meta skuid != 64055 accept", "ip daddr 127.0.0.1 tcp dport 7000 accept", "ip daddr 127.0.0.0/8 drop"} {
		if !strings.Contains(l, want) {
			t.Errorf("no %q in\n%s", want, l)
		}
	}
	if strings.Contains(l, "chain forward") {
		t.Errorf("tenant chains in user mode:\n%s", l)
	}
}

// With tenant networking a VM's forwarded ports reach it by DNAT to its leased address: the
// rule appears once the network leased the VM an address, names only that VM, and goes with
// the VM. nft runs for real, in a network namespace of the test's own.
func TestTenantForwardsFollowLeases(t *testing.T) {
	netnstest.Require(t)
	ctx := context.Background()
	ns := netnstest.Add(t, "gpc-hostdfw")
	e := newEnv(t, 0)
	e.net = virt.Network{Kind: "tenant"}
	e.fw = &tenantfw.Firewall{Command: []string{"ip", "netns", "exec", ns, "nft"}}
	h := e.hostd()
	h.cfg.Ports, h.cfg.PublicHost = PortRange{First: 23000, Last: 23010}, "node1.example"
	leases := map[string]netip.Addr{}
	h.leasedAddress = func(domain string, subnet netip.Prefix) (netip.Addr, error) {
		if a, ok := leases[domain]; ok && subnet.Contains(a) {
			return a, nil
		}
		return netip.Addr{}, nil
	}
	a1 := instance("a1", "tenantA", 0x11)
	a1.Spec.ForwardPorts = []int{8888}
	e.cp.Put(a1)
	if err := h.Once(ctx); err != nil {
		t.Fatal(err)
	}
	o := e.observed("a1")
	if len(o.Forwards) != 2 || o.Forwards[0] != (api.PortForward{GuestPort: 22, HostPort: 23000}) || o.PublicHost != "node1.example" {
		t.Fatalf("a1 observed %+v", o)
	}
	listing := func() string {
		t.Helper()
		l, err := e.fw.Listing(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	if l := listing(); strings.Contains(l, "dnat") {
		t.Fatalf("a forward before the VM has an address:\n%s", l)
	}
	leases[e.domains()["a1"].Name] = netip.MustParseAddr("10.128.17.23")
	if err := h.Once(ctx); err != nil {
		t.Fatal(err)
	}
	l := listing()
	for _, want := range []string{
		"tcp dport 23000 dnat ip to 10.128.17.23:22",
		"tcp dport 23001 dnat ip to 10.128.17.23:8888",
		`oifname "gpcbr17" ip daddr 10.128.17.23 tcp dport 22 ct status dnat accept`,
	} {
		if !strings.Contains(l, want) {
			t.Errorf("no %q in\n%s", want, l)
		}
	}
	if o := e.observed("a1"); o.PrivateAddress != "10.128.17.23" {
		t.Errorf("private address %q", o.PrivateAddress)
	}
	e.cp.SetDesired("a1", api.DesiredDeleted)
	if err := h.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if l := listing(); strings.Contains(l, "dnat") {
		t.Errorf("forward left after the VM went:\n%s", l)
	}
}

// hostd defines every domain to run as QEMU's user, so the filter above matches the sockets
// that carry its guests' connections whatever qemu.conf says; without -qemu-user, qemu.conf's.
func TestDomainsRunAsQEMUUser(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		uid, gid uint32
		label    string
	}{{64055, 64056, "<label>+64055:+64056</label>"}, {0, 0, ""}} {
		e := newEnv(t, 0)
		e.qemuUID, e.qemuGID = c.uid, c.gid
		e.cp.Put(instance("a1", "tenantA", 0x11))
		if err := e.hostd().Once(ctx); err != nil {
			t.Fatal(err)
		}
		x, err := e.hv.XML(virt.DomainName("a1"))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(x, "<seclabel"); got != (c.label != "") || !strings.Contains(x, c.label) {
			t.Errorf("QEMU user %d:%d: domain XML's label (want %q):\n%s", c.uid, c.gid, c.label, x)
		}
	}
	e := newEnv(t, 0)
	if _, err := New(Config{ControlPlane: e.cp.Client(t), Hypervisor: e.hv, DataDir: e.data, ImagesDir: e.images,
		Network: virt.Network{Kind: "user"}, QEMUUID: 64055}); err == nil || !strings.Contains(err.Error(), "group") {
		t.Errorf("QEMU user without a group: %v", err)
	}
}
