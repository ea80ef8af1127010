package tenantfw

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"gpucloud/hostd/tenantfw/netnstest"
)

// trafficLab is a host with two tenant bridges and a remote infrastructure host, all in network
// namespaces of the test's own:
//
//	vmA (10.128.17.5) ┐
//	vmA2 (10.128.17.6)┴ gpcbr17 ┐            ┌ lo 10.1.0.1 (this host's gpuserverd, apiserver)
//	                             host (routes)┤
//	vmB (10.128.34.5) ─ gpcbr34 ┘            └ veth 10.2.0.1 ─ remote (10.2.0.2: apiserver, GPU server)
//
// On the host, listeners on every address stand for the gpuserverd data port (7000), its admin
// port (7001) and the apiserver (8443); the remote host has an apiserver (8443) and a GPU
// server's data port (7100); each VM listens on 9000.
type trafficLab struct {
	host, vmA, vmA2, vmB, remote string
	rs                           Ruleset
}

func newTrafficLab(t *testing.T, brNetfilter bool) *trafficLab {
	netnstest.Require(t)
	const brnf = "/proc/sys/net/bridge/bridge-nf-call-iptables"
	if _, err := os.Stat(brnf); err != nil && brNetfilter {
		t.Skipf("kernel without br_netfilter (%v)", err)
	}
	l := &trafficLab{
		host: netnstest.Add(t, "gpc-host"), vmA: netnstest.Add(t, "gpc-vma"),
		vmA2: netnstest.Add(t, "gpc-vma2"), vmB: netnstest.Add(t, "gpc-vmb"), remote: netnstest.Add(t, "gpc-remote"),
	}
	h := func(argv ...string) { netnstest.Exec(t, l.host, argv...) }
	h("sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward")
	if _, err := os.Stat(brnf); err == nil { // per namespace: bridged frames through inet hooks, or not
		h("sh", "-c", fmt.Sprintf("echo %d > %s", map[bool]int{false: 0, true: 1}[brNetfilter], brnf))
	}
	h("ip", "addr", "add", "10.1.0.1/32", "dev", "lo") // the host's infrastructure address
	for _, br := range []struct{ name, gw string }{{"gpcbr17", "10.128.17.1"}, {"gpcbr34", "10.128.34.1"}} {
		h("ip", "link", "add", br.name, "type", "bridge")
		h("ip", "addr", "add", br.gw+"/24", "dev", br.name)
		h("ip", "link", "set", br.name, "up")
	}
	for i, vm := range []struct{ ns, bridge, gw, addr string }{
		{l.vmA, "gpcbr17", "10.128.17.1", "10.128.17.5"},
		{l.vmA2, "gpcbr17", "10.128.17.1", "10.128.17.6"},
		{l.vmB, "gpcbr34", "10.128.34.1", "10.128.34.5"},
	} {
		tap := fmt.Sprintf("tap%d", i)
		h("ip", "link", "add", tap, "type", "veth", "peer", "name", "eth0", "netns", vm.ns)
		h("ip", "link", "set", tap, "master", vm.bridge)
		h("ip", "link", "set", tap, "up")
		netnstest.Exec(t, vm.ns, "ip", "addr", "add", vm.addr+"/24", "dev", "eth0")
		netnstest.Exec(t, vm.ns, "ip", "link", "set", "eth0", "up")
		netnstest.Exec(t, vm.ns, "ip", "route", "add", "default", "via", vm.gw)
		netnstest.Listen(t, vm.ns, vm.addr+":9000")
	}
	h("ip", "link", "add", "uplink", "type", "veth", "peer", "name", "eth0", "netns", l.remote)
	h("ip", "addr", "add", "10.2.0.1/24", "dev", "uplink")
	h("ip", "link", "set", "uplink", "up")
	netnstest.Exec(t, l.remote, "ip", "addr", "add", "10.2.0.2/24", "dev", "eth0")
	netnstest.Exec(t, l.remote, "ip", "link", "set", "eth0", "up")
	netnstest.Exec(t, l.remote, "ip", "route", "add", "default", "via", "10.2.0.1")
	for _, port := range []string{"7000", "7001", "8443"} {
		netnstest.Listen(t, l.host, "0.0.0.0:"+port)
	}
	netnstest.Listen(t, l.remote, "0.0.0.0:8443")
	netnstest.Listen(t, l.remote, "0.0.0.0:7100")
	l.rs = Ruleset{Tenants: []Tenant{
		{Bridge: "gpcbr17", Subnet: netip.MustParsePrefix("10.128.17.0/24"), Gateway: netip.MustParseAddr("10.128.17.1"),
			DataPorts: []netip.AddrPort{netip.MustParseAddrPort("10.1.0.1:7000")},                                 // gpuserverd on this host
			Forwards:  []PortForward{{HostPort: 22017, VM: netip.MustParseAddr("10.128.17.5"), GuestPort: 9000}}}, // A's "SSH"
		{Bridge: "gpcbr34", Subnet: netip.MustParsePrefix("10.128.34.0/24"), Gateway: netip.MustParseAddr("10.128.34.1"),
			DataPorts: []netip.AddrPort{netip.MustParseAddrPort("10.2.0.2:7100")}}, // a GPU server elsewhere
	}}
	return l
}

// flow is one connection attempt and whether the firewall must let it through.
type flow struct {
	what, from, to string
	allowed        bool
}

// labForward is the host port the lab's firewall forwards to A's port 9000.
const labForward = ":22017"

// forwarded: through the host port the firewall forwards, so reachable only with its rules.
func (f flow) forwarded() bool { return strings.HasSuffix(f.to, labForward) }

func (l *trafficLab) flows() []flow {
	return []flow{
		{"A to A2 (same tenant)", l.vmA, "10.128.17.6:9000", true},
		{"A2 to A (same tenant)", l.vmA2, "10.128.17.5:9000", true},
		{"A2 to B", l.vmA2, "10.128.34.5:9000", false},
		{"A to B", l.vmA, "10.128.34.5:9000", false},
		{"B to A", l.vmB, "10.128.17.5:9000", false},
		{"A to its data port (this host)", l.vmA, "10.1.0.1:7000", true},
		{"B to its data port (remote)", l.vmB, "10.2.0.2:7100", true},
		{"A to gpuserverd admin port", l.vmA, "10.1.0.1:7001", false},
		{"A to apiserver on this host", l.vmA, "10.1.0.1:8443", false},
		{"A to apiserver via its gateway", l.vmA, "10.128.17.1:8443", false},
		{"A to admin port via its gateway", l.vmA, "10.128.17.1:7001", false},
		{"A to data port via B's gateway", l.vmA, "10.128.34.1:7000", false},
		{"A to remote apiserver", l.vmA, "10.2.0.2:8443", false},
		{"A to B's data port", l.vmA, "10.2.0.2:7100", false},
		{"B to A's data port", l.vmB, "10.1.0.1:7000", false},
		{"B to admin port", l.vmB, "10.1.0.1:7001", false},
		{"remote to A", l.remote, "10.128.17.5:9000", false},
		{"remote to A's forwarded port", l.remote, "10.2.0.1:22017", true},
		{"host to A's forwarded port", l.host, "10.1.0.1:22017", true},
		{"B to A's forwarded port (host's uplink)", l.vmB, "10.2.0.1:22017", false},
		{"B to A's forwarded port (B's gateway)", l.vmB, "10.128.34.1:22017", false},
		{"A2 to A's forwarded port (A's gateway)", l.vmA2, "10.128.17.1:22017", false},
	}
}

// check dials every flow (all at once: a dropped one waits out its timeout) and reports each
// one whose outcome differs from want(flow).
func (l *trafficLab) check(t *testing.T, stage string, want func(flow) bool) {
	t.Helper()
	flows := l.flows()
	errs := make([]error, len(flows))
	var wg sync.WaitGroup
	for i, f := range flows {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = netnstest.Reach(f.from, f.to, 1500*time.Millisecond)
		}()
	}
	wg.Wait()
	for i, f := range flows {
		if got := errs[i] == nil; got != want(f) {
			t.Errorf("%s: %s (%s): reached=%v (err %v), want %v", stage, f.what, f.to, got, errs[i], want(f))
		}
	}
}

// Real packets between namespaces: with no rules everything routes (so the lab itself does not
// block anything); with the tenant firewall only the allowed flows get through; after someone
// flushes the rules, Reconcile notices and restores them; an empty ruleset removes the table.
// Both with and without br_netfilter (common on hosts that also run containers), which sends
// frames between VMs of one bridge through the same hooks.
func TestTenantFirewallTraffic(t *testing.T) {
	for _, brnf := range []bool{false, true} {
		t.Run(fmt.Sprintf("br_netfilter=%v", brnf), func(t *testing.T) { testTenantFirewallTraffic(t, brnf) })
	}
}

func testTenantFirewallTraffic(t *testing.T, brNetfilter bool) {
	ctx := context.Background()
	l := newTrafficLab(t, brNetfilter)
	// Links just made may take a moment to pass traffic: every flow must connect within 10 s.
	for _, f := range l.flows() {
		if f.forwarded() {
			continue // no rules, no forward
		}
		var err error
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
			if err = netnstest.Reach(f.from, f.to, time.Second); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("no firewall, yet %s (%s) fails: %v", f.what, f.to, err)
		}
	}

	fw := &Firewall{Command: []string{"ip", "netns", "exec", l.host, "nft"}}
	if applied, err := fw.Reconcile(ctx, l.rs); err != nil || !applied {
		t.Fatalf("first reconcile: applied %v err %v", applied, err)
	}
	l.check(t, "firewall", func(f flow) bool { return f.allowed })

	if applied, err := fw.Reconcile(ctx, l.rs); err != nil || applied {
		t.Fatalf("unchanged reconcile: applied %v err %v, want nothing done", applied, err)
	}

	netnstest.Exec(t, l.host, "nft", "flush", "chain", "inet", Table, "forward")
	netnstest.Exec(t, l.host, "nft", "flush", "chain", "inet", Table, "input")
	if err := netnstest.Reach(l.vmA, "10.128.34.5:9000", time.Second); err != nil {
		t.Fatalf("flushed rules should let A reach B (else the drift test proves nothing): %v", err)
	}
	if applied, err := fw.Reconcile(ctx, l.rs); err != nil || !applied {
		t.Fatalf("reconcile after drift: applied %v err %v", applied, err)
	}
	l.check(t, "after drift and reconcile", func(f flow) bool { return f.allowed })

	netnstest.Exec(t, l.host, "nft", "delete", "table", "inet", Table)
	if applied, err := fw.Reconcile(ctx, l.rs); err != nil || !applied {
		t.Fatalf("reconcile after table deleted: applied %v err %v", applied, err)
	}
	if err := netnstest.Reach(l.vmA, "10.1.0.1:7001", time.Second); err == nil {
		t.Error("admin port reachable after the deleted table was restored")
	}

	// Tenant B's last VM goes: its bridge's rules go, A's stay.
	onlyA := Ruleset{Tenants: l.rs.Tenants[:1]}
	if _, err := fw.Reconcile(ctx, onlyA); err != nil {
		t.Fatal(err)
	}
	listing, err := fw.Listing(ctx)
	if err != nil || strings.Contains(listing, "gpcbr34") || !strings.Contains(listing, "gpcbr17") {
		t.Fatalf("listing after B left (err %v):\n%s", err, listing)
	}
	if err := netnstest.Reach(l.vmA, "10.1.0.1:7001", time.Second); err == nil {
		t.Error("A reaches the admin port after B left")
	}

	if _, err := fw.Reconcile(ctx, Ruleset{}); err != nil {
		t.Fatal(err)
	}
	if listing, err := fw.Listing(ctx); err != nil || listing != "" {
		t.Fatalf("table after the last tenant left: %q %v", listing, err)
	}
	if err := netnstest.Reach(l.vmA, "10.128.34.5:9000", time.Second); err != nil {
		t.Errorf("no tenants, no table, yet A cannot reach B: %v", err)
	}
}
