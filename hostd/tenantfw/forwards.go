package tenantfw

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// PortForward is a host TCP port forwarded to a port of a VM on a tenant network: how a tenant
// reaches its VM's SSH (and extra ports) from outside the host when VMs have private addresses.
// The host rewrites the destination (DNAT) of connections that arrive at one of its own
// addresses from outside the tenant networks; VMs themselves are never forwarded, so one
// tenant's VM cannot reach another's through the host.
type PortForward struct {
	HostPort  uint16
	VM        netip.Addr // the VM's address on its tenant network
	GuestPort uint16
}

func (f PortForward) String() string { return fmt.Sprintf("%d->%s:%d", f.HostPort, f.VM, f.GuestPort) }

// validateForwards checks every tenant's forwards: inside its own subnet (never its gateway),
// ports set, and no host port used twice on the host.
func (rs Ruleset) validateForwards() error {
	hostPorts := map[uint16]bool{}
	for i, t := range rs.Tenants {
		for j, f := range t.Forwards {
			if f.HostPort == 0 || f.GuestPort == 0 {
				return fmt.Errorf("tenantfw: tenants[%d].forwards[%d] %s: ports must be 1-65535", i, j, f)
			}
			if !f.VM.Is4() || !t.Subnet.Contains(f.VM) || f.VM == t.Gateway || f.VM == t.Subnet.Addr() {
				return fmt.Errorf("tenantfw: tenants[%d].forwards[%d] %s: the VM address is not a host address of %s", i, j, f, t.Subnet)
			}
			if hostPorts[f.HostPort] {
				return fmt.Errorf("tenantfw: tenants[%d].forwards[%d] %s: host port %d forwarded twice", i, j, f, f.HostPort)
			}
			hostPorts[f.HostPort] = true
		}
	}
	return nil
}

// forwardChains rewrite connections to a forwarded host port (from outside the tenant networks:
// the internet, the host itself) to their VM; the forward chain lets exactly those in (see
// forwardAccepts). ts must be valid; nothing is written when no tenant has forwards.
func forwardChains(b *strings.Builder, line func(string, ...any), ts []Tenant, all string, at netip.Addr) {
	fs := sortedForwards(ts)
	if len(fs) == 0 {
		return
	}
	dest := "fib daddr type local"
	if at.Is4() && !at.IsUnspecified() {
		dest = "ip daddr " + at.String()
	}
	// From another machine: the destination must be one of the host's own addresses, so
	// traffic routed through the host is never rewritten.
	b.WriteString("\tchain prerouting {\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n")
	line("iifname %s return", all)
	for _, f := range fs {
		line("%s tcp dport %d dnat ip to %s:%d", dest, f.HostPort, f.VM, f.GuestPort)
	}
	b.WriteString("\t}\n")
	// From the host itself (an operator's ssh to the host's address). Loopback is left alone:
	// a 127.0.0.1 source cannot be routed to a VM.
	b.WriteString("\tchain output_nat {\n\t\ttype nat hook output priority -100; policy accept;\n")
	line("ip daddr 127.0.0.0/8 return")
	for _, f := range fs {
		line("%s tcp dport %d dnat ip to %s:%d", dest, f.HostPort, f.VM, f.GuestPort)
	}
	b.WriteString("\t}\n")
}

// forwardAccepts lets a forwarded connection into its tenant network (the forward chain
// otherwise drops every connection opened into one): only packets the prerouting chain
// rewrote, to the forwarded VM and port.
func forwardAccepts(line func(string, ...any), ts []Tenant, all string) {
	for _, t := range ts {
		for _, f := range sortedForwards([]Tenant{t}) {
			line("iifname != %s oifname %q ip daddr %s tcp dport %d ct status dnat accept", all, t.Bridge, f.VM, f.GuestPort)
		}
	}
}

func sortedForwards(ts []Tenant) []PortForward {
	var out []PortForward
	for _, t := range ts {
		out = append(out, t.Forwards...)
	}
	slices.SortFunc(out, func(a, b PortForward) int { return int(a.HostPort) - int(b.HostPort) })
	return out
}
