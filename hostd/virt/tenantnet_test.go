package virt_test

import (
	"net/netip"
	"strings"
	"testing"

	"gpucloud/hostd/virt"
)

// Each tenant's network is its own bridge and /24, derived from its partition key; two keys
// never share a subnet; out-of-range keys are refused.
func TestTenantNetworksAreDisjoint(t *testing.T) {
	seen := map[netip.Prefix]uint16{}
	for _, pk := range []uint16{1, 2, 255, 256, 257, 0x7ffe, 0x7fff} {
		n, err := virt.TenantNetwork(pk)
		if err != nil {
			t.Fatal(err)
		}
		if other, dup := seen[n.Subnet]; dup {
			t.Fatalf("keys %d and %d share %s", pk, other, n.Subnet)
		}
		seen[n.Subnet] = pk
		if !n.Subnet.Contains(n.Gateway) || len(n.Bridge()) > 15 || !netip.MustParsePrefix("10.128.0.0/9").Contains(n.Subnet.Addr()) {
			t.Fatalf("key %d: %+v bridge %s", pk, n, n.Bridge())
		}
	}
	for _, bad := range []uint16{0, 0x8000} {
		if _, err := virt.TenantNetwork(bad); err == nil {
			t.Errorf("key %#x accepted", bad)
		}
	}
	n, _ := virt.TenantNetwork(0x0102)
	x, err := n.NetworkXML()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`<name>gpucloud-net-258</name>`, `<bridge name="gpcbr258"`, `<forward mode="nat">`,
		`<ip address="10.129.2.1" netmask="255.255.255.0">`, `<range start="10.129.2.2" end="10.129.2.254">`} {
		if !strings.Contains(x, want) {
			t.Errorf("network XML lacks %s:\n%s", want, x)
		}
	}
}

// The filter accepts DHCP, DNS to the gateway, the own subnet and the GPU server's data port,
// drops the rest of the gateway (the host's ports) before the subnet rule, and ends in a drop.
func TestTenantFilterRules(t *testing.T) {
	f := virt.FilterXML()
	order := []string{
		`<filterref filter="clean-traffic">`,
		`<udp srcportstart="68" dstportstart="67">`,
		`<udp dstipaddr="$GATEWAY" dstportstart="53">`,
		`<rule action="drop" direction="inout" priority="150"><ip dstipaddr="$GATEWAY">`,
		`<rule action="accept" direction="inout" priority="200"><ip srcipaddr="$SUBNET" srcipmask="$MASK" dstipaddr="$SUBNET" dstipmask="$MASK">`,
		`<tcp dstipaddr="$GPU_IP" dstportstart="$GPU_PORT">`,
		`<rule action="drop" direction="inout" priority="1000"><all>`,
	}
	last := -1
	for _, want := range order {
		i := strings.Index(f, want)
		if i < 0 || i < last {
			t.Fatalf("filter lacks %s (or out of order):\n%s", want, f)
		}
		last = i
	}
	s := spec(t.TempDir(), "tn1")
	n, _ := virt.TenantNetwork(7)
	s.Network, s.Tenant, s.GPUServer = virt.Network{Kind: "tenant"}, &n, netip.MustParseAddrPort("192.0.2.10:7000")
	x, err := virt.DomainXML(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`<source network="gpucloud-net-7">`, `<filterref filter="gpucloud-tenant">`,
		`<parameter name="GPU_IP" value="192.0.2.10">`, `<parameter name="GPU_PORT" value="7000">`,
		`<parameter name="SUBNET" value="10.128.7.0">`} {
		if !strings.Contains(x, want) {
			t.Errorf("domain XML lacks %s", want)
		}
	}
	s.Tenant = nil
	if _, err := virt.DomainXML(s); err == nil {
		t.Fatal("a tenant NIC without its network was accepted")
	}
}
