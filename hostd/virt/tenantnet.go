package virt

import (
	"encoding/xml"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"
)

// TenantFilter is the nwfilter every VM NIC on a tenant network carries (FilterXML).
const TenantFilter = "gpucloud-tenant"

// TenantNet is one tenant's network on one host: a NAT'd libvirt network of its own (own bridge,
// own /24, DHCP and DNS from the host), so tenants never share a layer-2 segment.
type TenantNet struct {
	PartitionKey uint16 // the tenant's partition key (1-32767) numbers its network
	Subnet       netip.Prefix
	Gateway      netip.Addr // the host's address on it: DHCP and DNS only
}

// TenantNetwork derives a tenant's network from its partition key: 10.(128+pk/256).(pk%256).0/24,
// so two tenants' subnets never overlap and the plan needs no allocator.
func TenantNetwork(pk uint16) (TenantNet, error) {
	if pk < 1 || pk > 0x7fff {
		return TenantNet{}, fmt.Errorf("virt: partition key %#x out of range 0x0001-0x7fff", pk)
	}
	base := netip.AddrFrom4([4]byte{10, byte(128 + pk>>8), byte(pk), 0})
	gw := base.Next()
	return TenantNet{PartitionKey: pk, Subnet: netip.PrefixFrom(base, 24), Gateway: gw}, nil
}

// Name is the libvirt network's name; Bridge its bridge (at most 15 characters).
func (n TenantNet) Name() string   { return fmt.Sprintf(tenantNetPrefix+"%d", n.PartitionKey) }
func (n TenantNet) Bridge() string { return fmt.Sprintf("gpcbr%d", n.PartitionKey) }

// NetworkXML is the libvirt network: NAT to the outside, DHCP over .2-.254.
func (n TenantNet) NetworkXML() (string, error) {
	b := n.Subnet.Addr().As4()
	first, last := b, b
	first[3], last[3] = 2, 254
	return (&libvirtxml.Network{
		Name:    n.Name(),
		Bridge:  &libvirtxml.NetworkBridge{Name: n.Bridge(), STP: "on", Delay: "0"},
		Forward: &libvirtxml.NetworkForward{Mode: "nat"},
		IPs: []libvirtxml.NetworkIP{{
			Address: n.Gateway.String(), Netmask: "255.255.255.0",
			DHCP: &libvirtxml.NetworkDHCP{Ranges: []libvirtxml.NetworkDHCPRange{{
				Start: netip.AddrFrom4(first).String(), End: netip.AddrFrom4(last).String()}}},
		}},
	}).Marshal()
}

// FilterRef is the NIC's reference to TenantFilter with this VM's parameters: its tenant's
// subnet and gateway, and the one infrastructure endpoint it may reach (its GPU server's data
// port; none for a VM without GPUs).
func (n TenantNet) FilterRef(gpuServer netip.AddrPort) *libvirtxml.DomainInterfaceFilterRef {
	params := []libvirtxml.DomainInterfaceFilterParam{
		{Name: "CTRL_IP_LEARNING", Value: "dhcp"},
		{Name: "DHCPSERVER", Value: n.Gateway.String()},
		{Name: "GATEWAY", Value: n.Gateway.String()},
		{Name: "SUBNET", Value: n.Subnet.Addr().String()},
		{Name: "MASK", Value: "24"},
	}
	if gpuServer.IsValid() {
		params = append(params, libvirtxml.DomainInterfaceFilterParam{Name: "GPU_IP", Value: gpuServer.Addr().String()},
			libvirtxml.DomainInterfaceFilterParam{Name: "GPU_PORT", Value: fmt.Sprint(gpuServer.Port())})
	}
	return &libvirtxml.DomainInterfaceFilterRef{Filter: TenantFilter, Parameters: params}
}

// FilterXML is TenantFilter: no spoofing (clean-traffic), DHCP and DNS to the host's gateway
// and nothing else of the host, the tenant's own subnet, the GPU server's data port, and every
// other packet dropped: other tenants, the apiserver, hostd, gpuserverd's admin port, other
// hosts. A rule whose variable a VM lacks (GPU_IP without GPUs) is left out by libvirt.
func FilterXML() string {
	type filterRef struct {
		Filter string `xml:"filter,attr"`
	}
	type proto struct {
		XMLName  xml.Name
		SrcIP    string `xml:"srcipaddr,attr,omitempty"`
		SrcMask  string `xml:"srcipmask,attr,omitempty"`
		DstIP    string `xml:"dstipaddr,attr,omitempty"`
		DstMask  string `xml:"dstipmask,attr,omitempty"`
		SrcPort  string `xml:"srcportstart,attr,omitempty"`
		DstPort  string `xml:"dstportstart,attr,omitempty"`
		Protocol string `xml:"protocol,attr,omitempty"`
	}
	type rule struct {
		Action    string `xml:"action,attr"`
		Direction string `xml:"direction,attr"`
		Priority  int    `xml:"priority,attr"`
		Match     proto
	}
	type filter struct {
		XMLName xml.Name    `xml:"filter"`
		Name    string      `xml:"name,attr"`
		Chain   string      `xml:"chain,attr"`
		Refs    []filterRef `xml:"filterref"`
		Rules   []rule      `xml:"rule"`
	}
	p := func(name string, m proto) proto { m.XMLName = xml.Name{Local: name}; return m }
	f := filter{Name: TenantFilter, Chain: "root",
		Refs: []filterRef{{"clean-traffic"}, {"allow-arp"}},
		Rules: []rule{
			{"accept", "out", 100, p("udp", proto{SrcPort: "68", DstPort: "67"})},
			{"accept", "in", 100, p("udp", proto{SrcPort: "67", DstPort: "68"})},
			{"accept", "out", 110, p("udp", proto{DstIP: "$GATEWAY", DstPort: "53"})},
			{"accept", "out", 110, p("tcp", proto{DstIP: "$GATEWAY", DstPort: "53"})},
			{"drop", "inout", 150, p("ip", proto{DstIP: "$GATEWAY"})},
			{"accept", "inout", 200, p("ip", proto{SrcIP: "$SUBNET", SrcMask: "$MASK", DstIP: "$SUBNET", DstMask: "$MASK"})},
			{"accept", "out", 300, p("tcp", proto{DstIP: "$GPU_IP", DstPort: "$GPU_PORT"})},
			{"drop", "inout", 1000, p("all", proto{})},
		}}
	b, _ := xml.Marshal(f) // fixed structs: cannot fail
	return string(b)
}

// EnsureTenantNetwork defines, starts and autostarts a tenant's network unless it runs already.
func (h *Hypervisor) EnsureTenantNetwork(n TenantNet) error {
	x, err := n.NetworkXML()
	if err != nil {
		return fmt.Errorf("virt: network XML: %w", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	nw, err := h.conn.LookupNetworkByName(n.Name())
	if err != nil {
		if nw, err = h.conn.NetworkDefineXML(x); err != nil {
			return fmt.Errorf("virt: define network %s: %w", n.Name(), err)
		}
		if err := nw.SetAutostart(true); err != nil {
			nw.Free()
			return fmt.Errorf("virt: autostart network %s: %w", n.Name(), err)
		}
	}
	defer nw.Free()
	if active, err := nw.IsActive(); err != nil || active {
		return err
	}
	if err := nw.Create(); err != nil {
		return fmt.Errorf("virt: start network %s: %w", n.Name(), err)
	}
	return nil
}

// ErrNoFilters: the libvirt driver has no nwfilter support (the test driver).
var ErrNoFilters = errors.New("virt: this libvirt connection has no nwfilter driver")

// EnsureTenantFilter defines (or redefines, keeping it current) TenantFilter.
func (h *Hypervisor) EnsureTenantFilter() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	f, err := h.conn.NWFilterDefineXML(FilterXML())
	var lerr libvirt.Error
	if errors.As(err, &lerr) && lerr.Code == libvirt.ERR_NO_SUPPORT {
		return ErrNoFilters
	}
	if err != nil {
		return fmt.Errorf("virt: define nwfilter %s: %w", TenantFilter, err)
	}
	return f.Free()
}

// TenantAddress is a tenant network's subnet as text, for the API.
func (n TenantNet) String() string { return n.Subnet.String() }

// NetworkActive reports whether a libvirt network exists and runs.
func (h *Hypervisor) NetworkActive(name string) (bool, error) {
	nw, err := h.conn.LookupNetworkByName(name)
	if err != nil {
		return false, fmt.Errorf("virt: look up network %s: %w", name, err)
	}
	defer nw.Free()
	return nw.IsActive()
}

// LeasedAddress is the domain's IPv4 address inside subnet as its network's DHCP leases say
// (invalid when none: not booted yet, or no lease).
func (h *Hypervisor) LeasedAddress(name string, subnet netip.Prefix) (netip.Addr, error) {
	var out netip.Addr
	err := h.with(name, func(d *libvirt.Domain) error {
		ifaces, err := d.ListAllInterfaceAddresses(libvirt.DOMAIN_INTERFACE_ADDRESSES_SRC_LEASE)
		if err != nil {
			return fmt.Errorf("virt: addresses of %s: %w", name, err)
		}
		for _, i := range ifaces {
			for _, a := range i.Addrs {
				if ip, err := netip.ParseAddr(a.Addr); err == nil && subnet.Contains(ip) {
					out = ip
					return nil
				}
			}
		}
		return nil
	})
	return out, err
}

// tenantNetPrefix starts every tenant network's name (TenantNet.Name).
const tenantNetPrefix = "gpucloud-net-"

// TenantNetworks lists the partition keys of the tenant networks defined on this host.
func (h *Hypervisor) TenantNetworks() ([]uint16, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	nets, err := h.conn.ListAllNetworks(0)
	if err != nil {
		return nil, fmt.Errorf("virt: list networks: %w", err)
	}
	var out []uint16
	for _, nw := range nets {
		name, err := nw.GetName()
		nw.Free()
		if err != nil {
			return nil, fmt.Errorf("virt: network name: %w", err)
		}
		var pk uint16
		if rest, ok := strings.CutPrefix(name, tenantNetPrefix); ok {
			if _, err := fmt.Sscanf(rest, "%d", &pk); err == nil && fmt.Sprint(pk) == rest {
				out = append(out, pk)
			}
		}
	}
	return out, nil
}

// RemoveTenantNetwork stops and undefines a tenant's network (gone already: nothing to do).
func (h *Hypervisor) RemoveTenantNetwork(pk uint16) error {
	name := TenantNet{PartitionKey: pk}.Name()
	h.mu.Lock()
	defer h.mu.Unlock()
	nw, err := h.conn.LookupNetworkByName(name)
	var lerr libvirt.Error
	if errors.As(err, &lerr) && lerr.Code == libvirt.ERR_NO_NETWORK {
		return nil
	}
	if err != nil {
		return fmt.Errorf("virt: look up network %s: %w", name, err)
	}
	defer nw.Free()
	if active, err := nw.IsActive(); err == nil && active {
		if err := nw.Destroy(); err != nil {
			return fmt.Errorf("virt: stop network %s: %w", name, err)
		}
	}
	if err := nw.Undefine(); err != nil {
		return fmt.Errorf("virt: undefine network %s: %w", name, err)
	}
	return nil
}
