package tenantfw

import (
	"net/netip"
	"strings"
	"testing"
)

func twoTenants() Ruleset {
	return Ruleset{Tenants: []Tenant{
		{Bridge: "gpcbr34", Subnet: netip.MustParsePrefix("10.128.34.0/24"), Gateway: netip.MustParseAddr("10.128.34.1")},
		{Bridge: "gpcbr17", Subnet: netip.MustParsePrefix("10.128.17.0/24"), Gateway: netip.MustParseAddr("10.128.17.1"),
			DataPorts: []netip.AddrPort{netip.MustParseAddrPort("10.1.0.1:7000"), netip.MustParseAddrPort("10.1.0.1:7000")}},
	}}
}

// chain is the rule lines of one chain of a rendered script.
func chain(t *testing.T, script, name string) []string {
	t.Helper()
	_, rest, ok := strings.Cut(script, "\tchain "+name+" {\n")
	if !ok {
		t.Fatalf("no chain %s in\n%s", name, script)
	}
	body, _, _ := strings.Cut(rest, "\t}\n")
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(body), "\n") {
		out = append(out, strings.TrimSpace(l))
	}
	return out
}

func index(lines []string, rule string) int {
	for i, l := range lines {
		if l == rule {
			return i
		}
	}
	return -1
}

func TestRenderRules(t *testing.T) {
	s, err := Render(twoTenants())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(s, "table inet gpucloud\ndelete table inet gpucloud\ntable inet gpucloud {\n") {
		t.Fatalf("script does not replace the table in one transaction:\n%s", s)
	}
	in, fwd := chain(t, s, "input"), chain(t, s, "forward")
	for _, c := range []struct {
		why   string
		chain []string
		rule  string
	}{
		{"input hook, accepting other interfaces' traffic", in, "type filter hook input priority filter; policy accept;"},
		{"only tenant bridges are filtered on input", in, `iifname != { "gpcbr17", "gpcbr34" } accept`},
		{"DHCP to the host", in, "udp sport 68 udp dport 67 accept"},
		{"DNS to A's gateway only", in, `iifname "gpcbr17" ip daddr 10.128.17.1 udp dport 53 accept`},
		{"A's data port on this host", in, `iifname "gpcbr17" ip daddr 10.1.0.1 tcp dport 7000 accept`},
		{"A spoofing another source", in, `iifname "gpcbr17" ip saddr != 10.128.17.0/24 drop`},
		{"IPv6 from VMs", in, "meta nfproto ipv6 drop"},
		{"forward hook", fwd, "type filter hook forward priority filter; policy accept;"},
		{"A to another tenant's bridge", fwd, `iifname "gpcbr17" oifname != "gpcbr17" oifname { "gpcbr17", "gpcbr34" } drop`},
		{"B to another tenant's bridge", fwd, `iifname "gpcbr34" oifname != "gpcbr34" oifname { "gpcbr17", "gpcbr34" } drop`},
		{"within tenant A", fwd, `iifname "gpcbr17" oifname "gpcbr17" accept`},
		{"outside into tenant networks", fwd, `oifname { "gpcbr17", "gpcbr34" } iifname != { "gpcbr17", "gpcbr34" } drop`},
		{"A's data port elsewhere", fwd, `iifname "gpcbr17" ip daddr 10.1.0.1 tcp dport 7000 accept`},
		{"platform networks", fwd, "ip daddr { 10.0.0.0/8, 100.64.0.0/10, 169.254.0.0/16, 172.16.0.0/12, 192.168.0.0/16 } drop"},
	} {
		if index(c.chain, c.rule) < 0 {
			t.Errorf("%s: no rule %q", c.why, c.rule)
		}
	}
	// Order matters: the data port is accepted before the platform networks are dropped, and
	// everything a VM sends to the host ends in a drop.
	if a, d := index(fwd, `iifname "gpcbr17" ip daddr 10.1.0.1 tcp dport 7000 accept`), index(fwd, "ip daddr { 10.0.0.0/8, 100.64.0.0/10, 169.254.0.0/16, 172.16.0.0/12, 192.168.0.0/16 } drop"); a > d {
		t.Errorf("data port accept (%d) after the infra drop (%d)", a, d)
	}
	// Forged sources and IPv6 are dropped before conntrack may accept a VM's packet.
	for name, c := range map[string][]string{"input": in, "forward": fwd} {
		est := index(c, "ct state established,related accept")
		for _, rule := range []string{`iifname "gpcbr17" ip saddr != 10.128.17.0/24 drop`, `iifname "gpcbr34" ip saddr != 10.128.34.0/24 drop`, "meta nfproto ipv6 drop"} {
			if i := index(c, rule); i < 0 || est < 0 || i > est {
				t.Errorf("%s: %q at %d, conntrack accept at %d", name, rule, i, est)
			}
		}
	}
	if in[len(in)-1] != "drop" {
		t.Errorf("input does not end in drop: %q", in[len(in)-1])
	}
	if strings.Count(s, "tcp dport 7000 accept") != 2 {
		t.Errorf("duplicate data port not folded into one rule per chain:\n%s", s)
	}
	for _, rule := range in {
		if strings.Contains(rule, "gpcbr34") && strings.Contains(rule, "7000") {
			t.Errorf("B may reach A's data port: %q", rule)
		}
	}
	// Tenant order in the input does not change the script (hostd compares scripts for drift).
	rs := twoTenants()
	rs.Tenants[0], rs.Tenants[1] = rs.Tenants[1], rs.Tenants[0]
	if s2, _ := Render(rs); s2 != s {
		t.Error("tenant order changes the rendered script")
	}
}

func TestRenderCustomInfra(t *testing.T) {
	rs := twoTenants()
	rs.Infra = []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}
	s, err := Render(rs)
	if err != nil {
		t.Fatal(err)
	}
	if index(chain(t, s, "forward"), "ip daddr { 203.0.113.0/24 } drop") < 0 {
		t.Errorf("custom infra network not dropped:\n%s", s)
	}
}

func TestRenderNoTenantsDeletesTable(t *testing.T) {
	s, err := Render(Ruleset{})
	if err != nil || s != "table inet gpucloud\ndelete table inet gpucloud\n" {
		t.Fatalf("%q %v", s, err)
	}
}

func TestValidateNamesTheField(t *testing.T) {
	for _, c := range []struct {
		field string
		edit  func(*Ruleset)
	}{
		{"tenants[0].bridge", func(r *Ruleset) { r.Tenants[0].Bridge = `x" accept; #` }},
		{"tenants[0].bridge", func(r *Ruleset) { r.Tenants[0].Bridge = "averyveryverylongname" }},
		{"tenants[1].bridge", func(r *Ruleset) { r.Tenants[1].Bridge = r.Tenants[0].Bridge }},
		{"tenants[0].subnet", func(r *Ruleset) { r.Tenants[0].Subnet = netip.MustParsePrefix("10.128.34.7/24") }},
		{"tenants[0].subnet", func(r *Ruleset) { r.Tenants[0].Subnet = netip.MustParsePrefix("fd00::/64") }},
		{"tenants[0].subnet", func(r *Ruleset) { r.Tenants[0].Subnet = netip.MustParsePrefix("0.0.0.0/0") }},
		{"tenants[1].subnet", func(r *Ruleset) { r.Tenants[1].Subnet = netip.MustParsePrefix("10.128.0.0/16") }},
		{"tenants[0].gateway", func(r *Ruleset) { r.Tenants[0].Gateway = netip.MustParseAddr("10.128.17.1") }},
		{"tenants[1].data_ports[0]", func(r *Ruleset) { r.Tenants[1].DataPorts[0] = netip.MustParseAddrPort("10.1.0.1:0") }},
		{"tenants[1].data_ports[1]", func(r *Ruleset) { r.Tenants[1].DataPorts[1] = netip.MustParseAddrPort("10.128.34.5:22") }},
		{"infra[0]", func(r *Ruleset) { r.Infra = []netip.Prefix{netip.MustParsePrefix("10.1.2.3/8")} }},
	} {
		rs := twoTenants()
		c.edit(&rs)
		_, err := Render(rs)
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: err %v, want one naming it", c.field, err)
		}
	}
}

// Whatever a caller passes, Render either refuses it or writes a script whose every interface
// name is quoted and whose every line belongs to the table (no injected statements).
func FuzzRender(f *testing.F) {
	f.Add("gpcbr17", "10.128.17.0/24", "10.128.17.1", "10.1.0.1:7000", "10.0.0.0/8")
	f.Add(`a" drop; table ip x {`, "10.0.0.0/8", "10.0.0.1", "1.2.3.4:1", "")
	f.Add("b\nflush ruleset", "::/0", "::1", "[::1]:5", "0.0.0.0/0")
	f.Fuzz(func(t *testing.T, bridge, subnet, gateway, dataPort, infra string) {
		tn := Tenant{Bridge: bridge}
		tn.Subnet, _ = netip.ParsePrefix(subnet)
		tn.Gateway, _ = netip.ParseAddr(gateway)
		if dp, err := netip.ParseAddrPort(dataPort); err == nil {
			tn.DataPorts = []netip.AddrPort{dp}
		}
		rs := Ruleset{Tenants: []Tenant{tn}}
		if p, err := netip.ParsePrefix(infra); err == nil {
			rs.Infra = []netip.Prefix{p}
		}
		s, err := Render(rs)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "tenantfw: ") {
				t.Fatalf("error without context: %v", err)
			}
			return
		}
		if !bridgeName.MatchString(bridge) || !tn.Subnet.Contains(tn.Gateway) {
			t.Fatalf("accepted bridge %q gateway %s in %s", bridge, tn.Gateway, tn.Subnet)
		}
		for _, l := range strings.Split(s, "\n") {
			if strings.Contains(l, "flush") || strings.Count(l, `"`)%2 != 0 {
				t.Fatalf("suspicious line %q in\n%s", l, s)
			}
		}
		if strings.Count(s, "table inet ") != 3 || strings.Count(s, "chain ") != 2 {
			t.Fatalf("script has other tables or chains:\n%s", s)
		}
	})
}

// A tenant's forwards become DNAT rules for connections from outside the tenant networks, and
// the forward chain lets in only those rewritten connections, before it drops every other one
// opened into a tenant network.
func TestRenderForwards(t *testing.T) {
	rs := twoTenants()
	rs.Tenants[1].Forwards = []PortForward{{HostPort: 22001, VM: netip.MustParseAddr("10.128.17.5"), GuestPort: 22}}
	s, err := Render(rs)
	if err != nil {
		t.Fatal(err)
	}
	pre, out, fwd := chain(t, s, "prerouting"), chain(t, s, "output_nat"), chain(t, s, "forward")
	all := `{ "gpcbr17", "gpcbr34" }`
	if index(pre, "iifname "+all+" return") != 1 || index(pre, "fib daddr type local tcp dport 22001 dnat ip to 10.128.17.5:22") != 2 {
		t.Errorf("prerouting does not skip VMs before rewriting:\n%s", strings.Join(pre, "\n"))
	}
	if index(out, "ip daddr 127.0.0.0/8 return") < 0 || index(out, "fib daddr type local tcp dport 22001 dnat ip to 10.128.17.5:22") < 0 {
		t.Errorf("output_nat:\n%s", strings.Join(out, "\n"))
	}
	accept := index(fwd, `iifname != `+all+` oifname "gpcbr17" ip daddr 10.128.17.5 tcp dport 22 ct status dnat accept`)
	drop := index(fwd, `oifname `+all+` iifname != `+all+` drop`)
	if accept < 0 || drop < 0 || accept > drop {
		t.Errorf("forwarded connections must be accepted (at %d) before new connections into tenant networks are dropped (at %d):\n%s",
			accept, drop, strings.Join(fwd, "\n"))
	}
	rs.ForwardAddr = netip.MustParseAddr("203.0.113.9")
	if s, err := Render(rs); err != nil || index(chain(t, s, "prerouting"), "ip daddr 203.0.113.9 tcp dport 22001 dnat ip to 10.128.17.5:22") < 0 {
		t.Errorf("with a forward address (err %v):\n%s", err, s)
	}
	if s, err := Render(twoTenants()); err != nil || strings.Contains(s, "prerouting") {
		t.Errorf("without forwards (err %v), nat chains:\n%s", err, s)
	}
}

func TestForwardsValidation(t *testing.T) {
	for _, c := range []struct {
		name string
		f    PortForward
		want string
	}{
		{"other tenant's VM", PortForward{HostPort: 22001, VM: netip.MustParseAddr("10.128.34.5"), GuestPort: 22}, "not a host address of 10.128.17.0/24"},
		{"gateway", PortForward{HostPort: 22001, VM: netip.MustParseAddr("10.128.17.1"), GuestPort: 22}, "not a host address"},
		{"infrastructure", PortForward{HostPort: 22001, VM: netip.MustParseAddr("10.1.0.1"), GuestPort: 7001}, "not a host address"},
		{"no host port", PortForward{VM: netip.MustParseAddr("10.128.17.5"), GuestPort: 22}, "ports must be"},
	} {
		rs := twoTenants()
		rs.Tenants[1].Forwards = []PortForward{c.f}
		if _, err := Render(rs); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want %q", c.name, err, c.want)
		}
	}
	rs := twoTenants()
	rs.Tenants[0].Forwards = []PortForward{{HostPort: 22001, VM: netip.MustParseAddr("10.128.34.5"), GuestPort: 22}}
	rs.Tenants[1].Forwards = []PortForward{{HostPort: 22001, VM: netip.MustParseAddr("10.128.17.5"), GuestPort: 22}}
	if _, err := Render(rs); err == nil || !strings.Contains(err.Error(), "forwarded twice") {
		t.Errorf("one host port for two VMs: err %v", err)
	}
}
