// Package tenantfw is the host firewall that keeps tenants' VMs apart: hostd renders an nftables
// ruleset from the tenants it runs VMs for (their bridges, subnets and the GPU server data ports
// their VMs may reach), applies it atomically with `nft -f` and re-applies it when it drifts.
// The ruleset lives in one table of its own (inet gpucloud) that nothing else writes.
package tenantfw

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
)

// Table is the nftables table hostd owns (family inet: IPv4 and IPv6).
const Table = "gpucloud"

// Tenant is one tenant's network on this host, as the firewall sees it.
type Tenant struct {
	Bridge    string       // the Linux bridge its VMs' NICs join
	Subnet    netip.Prefix // its IPv4 subnet (what its VMs may use as source addresses)
	Gateway   netip.Addr   // the host's address on it: DHCP and DNS only
	DataPorts []netip.AddrPort
	// DataPorts are the GPU servers' data ports this tenant's VMs may open TCP connections to
	// (on this host or another); every other infrastructure address and port is dropped.
	Forwards []PortForward // host ports forwarded to its VMs (SSH first)
}

// Ruleset is the desired state: every tenant with a VM on this host.
type Ruleset struct {
	Tenants []Tenant
	// UserMode filters QEMU user-mode networking (nil: not used on this host).
	UserMode *UserMode
	// Infra are the networks the platform's own services live in (apiserver, gpuserverd admin
	// ports, other hosts); a VM reaches nothing in them but its data ports. Empty: DefaultInfra.
	Infra []netip.Prefix
	// ForwardAddr is the host address tenants' forwarded ports answer on; invalid or
	// unspecified (0.0.0.0): every address of the host but loopback.
	ForwardAddr netip.Addr
}

// DefaultInfra is every private, shared and link-local IPv4 range: a VM may reach the internet
// through NAT, never the platform's private networks.
var DefaultInfra = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
}

// bridgeName is what an interface name may be here: short, and nothing nft would read as syntax.
var bridgeName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,14}$`)

// Validate reports the first field that cannot go into a ruleset, naming it.
func (rs Ruleset) Validate() error {
	bridges := map[string]bool{}
	var subnets []netip.Prefix
	for i, t := range rs.Tenants {
		if !bridgeName.MatchString(t.Bridge) {
			return fmt.Errorf("tenantfw: tenants[%d].bridge %q: want 1-15 of [A-Za-z0-9_-], starting with a letter", i, t.Bridge)
		}
		if bridges[t.Bridge] {
			return fmt.Errorf("tenantfw: tenants[%d].bridge %q: used by two tenants", i, t.Bridge)
		}
		bridges[t.Bridge] = true
		if !t.Subnet.IsValid() || !t.Subnet.Addr().Is4() || t.Subnet.Bits() < 8 || t.Subnet.Masked() != t.Subnet {
			return fmt.Errorf("tenantfw: tenants[%d].subnet %q: want an IPv4 network address, /8 to /32", i, t.Subnet)
		}
		if !t.Gateway.Is4() || !t.Subnet.Contains(t.Gateway) {
			return fmt.Errorf("tenantfw: tenants[%d].gateway %q: not an address in %s", i, t.Gateway, t.Subnet)
		}
		for _, s := range subnets {
			if s.Overlaps(t.Subnet) {
				return fmt.Errorf("tenantfw: tenants[%d].subnet %s overlaps %s of another tenant", i, t.Subnet, s)
			}
		}
		subnets = append(subnets, t.Subnet)
	}
	for i, t := range rs.Tenants {
		for j, dp := range t.DataPorts {
			if !dp.IsValid() || !dp.Addr().Is4() || dp.Port() == 0 {
				return fmt.Errorf("tenantfw: tenants[%d].data_ports[%d] %q: want IPv4:port", i, j, dp)
			}
			for _, s := range subnets { // a "data port" inside a tenant network would open that network
				if s.Contains(dp.Addr()) {
					return fmt.Errorf("tenantfw: tenants[%d].data_ports[%d] %s: inside tenant subnet %s", i, j, dp, s)
				}
			}
		}
	}
	if err := rs.validateForwards(); err != nil {
		return err
	}
	if u := rs.UserMode; u != nil {
		if err := u.validate(); err != nil {
			return err
		}
	}
	for i, p := range rs.Infra {
		if !p.IsValid() || !p.Addr().Is4() || p.Masked() != p {
			return fmt.Errorf("tenantfw: infra[%d] %q: want an IPv4 network address", i, p)
		}
	}
	return nil
}

// Render is the nft script that replaces the table with this ruleset in one transaction (the
// table is created empty, deleted and made again, so `nft -f` never fails on a missing table and
// no packet ever sees half a ruleset). With nothing to filter it only deletes the table.
func Render(rs Ruleset) (string, error) {
	if err := rs.Validate(); err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "table inet %s\ndelete table inet %s\n", Table, Table)
	if len(rs.Tenants) == 0 && rs.UserMode == nil {
		return b.String(), nil
	}
	fmt.Fprintf(&b, "table inet %s {\n", Table)
	line := func(format string, a ...any) { fmt.Fprintf(&b, "\t\t"+format+"\n", a...) }
	infra := rs.Infra
	if len(infra) == 0 {
		infra = DefaultInfra
	}
	if len(rs.Tenants) > 0 {
		tenantChains(&b, line, rs.Tenants, infra, rs.ForwardAddr)
	}
	if rs.UserMode != nil {
		userModeChain(&b, line, *rs.UserMode, infra)
	}
	b.WriteString("}\n")
	return b.String(), nil
}

// tenantChains filter what VMs on tenant bridges send; ts must be valid.
func tenantChains(b *strings.Builder, line func(string, ...any), ts []Tenant, infra []netip.Prefix, forwardAddr netip.Addr) {
	tenants := slices.Clone(ts)
	slices.SortFunc(tenants, func(a, b Tenant) int { return strings.Compare(a.Bridge, b.Bridge) })
	var bridges []string
	for _, t := range tenants {
		bridges = append(bridges, fmt.Sprintf("%q", t.Bridge))
	}
	all := "{ " + strings.Join(bridges, ", ") + " }"
	if len(bridges) == 1 {
		all = bridges[0]
	}

	// input: a VM talking to the host itself (any of its addresses): DHCP and DNS from the
	// gateway, a data port served here, replies; nothing else (apiserver, admin ports, hostd,
	// SSH, other VMs' forwards).
	b.WriteString("\tchain input {\n\t\ttype filter hook input priority filter; policy accept;\n")
	line("iifname != %s accept", all)
	// A VM's packets are checked for IPv6 and forged sources before anything may accept
	// them, conntrack included (a forged packet could match another VM's connection).
	line("meta nfproto ipv6 drop")
	line("udp sport 68 udp dport 67 accept") // DHCP, sent before the VM has an address
	spoofChecks(line, tenants)
	line("ct state established,related accept")
	for _, t := range tenants {
		line("iifname %q ip daddr %s udp dport 53 accept", t.Bridge, t.Gateway)
		line("iifname %q ip daddr %s tcp dport 53 accept", t.Bridge, t.Gateway)
		for _, dp := range sortedPorts(t.DataPorts) {
			line("iifname %q ip daddr %s tcp dport %d accept", t.Bridge, dp.Addr(), dp.Port())
		}
	}
	line("drop")
	b.WriteString("\t}\n")

	// forward: a VM's packets routed elsewhere. No tenant reaches another tenant's subnet or
	// the platform's networks, only its own data ports and the internet (through NAT).
	b.WriteString("\tchain forward {\n\t\ttype filter hook forward priority filter; policy accept;\n")
	line("iifname != %s ct state established,related accept", all) // replies to VMs
	forwardAccepts(line, tenants, all)                             // a tenant's forwarded ports
	line("oifname %s iifname != %s drop", all, all)                // nothing opens a connection into a tenant network
	line("iifname != %s accept", all)
	line("meta nfproto ipv6 drop")
	spoofChecks(line, tenants)
	line("ct state established,related accept")
	for _, t := range tenants {
		// Within one tenant (seen here when br_netfilter hands bridged frames to inet hooks).
		line("iifname %q oifname %q accept", t.Bridge, t.Bridge)
		line("iifname %q oifname != %q oifname %s drop", t.Bridge, t.Bridge, all)
		for _, dp := range sortedPorts(t.DataPorts) {
			line("iifname %q ip daddr %s tcp dport %d accept", t.Bridge, dp.Addr(), dp.Port())
		}
	}
	line("ip daddr %s drop", infraSet(infra))
	for _, t := range tenants {
		line("ip daddr %s drop", t.Subnet) // another tenant's subnet, however routed
	}
	line("accept")
	b.WriteString("\t}\n")
	forwardChains(b, line, tenants, all, forwardAddr)
}

// infraSet is the platform's networks as an nft set.
func infraSet(infra []netip.Prefix) string {
	nets := make([]string, len(infra))
	for i, p := range infra {
		nets[i] = p.String()
	}
	return "{ " + strings.Join(nets, ", ") + " }"
}

// spoofChecks drops a VM's packets whose source is outside its tenant's subnet.
func spoofChecks(line func(string, ...any), tenants []Tenant) {
	for _, t := range tenants {
		line("iifname %q ip saddr != %s drop", t.Bridge, t.Subnet)
	}
}

func sortedPorts(ps []netip.AddrPort) []netip.AddrPort {
	out := slices.Clone(ps)
	slices.SortFunc(out, func(a, b netip.AddrPort) int { return a.Compare(b) })
	return slices.Compact(out)
}
