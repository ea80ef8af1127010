package tenantfw

import (
	"context"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"gpucloud/hostd/tenantfw/netnstest"
)

// qemuUID stands for the QEMU user's uid (nobody).
const qemuUID = 65534

func TestRenderUserMode(t *testing.T) {
	s, err := Render(Ruleset{UserMode: &UserMode{QEMUUID: 64055, DataPorts: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:7000")}}})
	if err != nil {
		t.Fatal(err)
	}
	out := chain(t, s, "output")
	for _, rule := range []string{"meta skuid != 64055 accept", "ip daddr 127.0.0.1 tcp dport 7000 accept", "ip daddr 127.0.0.0/8 drop", "fib daddr type local drop"} {
		if index(out, rule) < 0 {
			t.Errorf("no %q in\n%s", rule, s)
		}
	}
	if index(out, "ip daddr 127.0.0.1 tcp dport 7000 accept") > index(out, "ip daddr 127.0.0.0/8 drop") ||
		index(out, "ip daddr 127.0.0.1 tcp dport 7000 accept") > index(out, "fib daddr type local drop") {
		t.Error("data port accepted after the loopback or host-address drop")
	}
	if strings.Contains(s, "chain input") || strings.Contains(s, "chain forward") {
		t.Errorf("tenant chains without tenants:\n%s", s)
	}
	if _, err := Render(Ruleset{UserMode: &UserMode{QEMUUID: 0}}); err == nil || !strings.Contains(err.Error(), "user_mode.qemu_uid") {
		t.Errorf("root as QEMU user: %v", err)
	}
	if _, err := Render(Ruleset{UserMode: &UserMode{QEMUUID: 5, DataPorts: []netip.AddrPort{{}}}}); err == nil || !strings.Contains(err.Error(), "user_mode.data_ports[0]") {
		t.Errorf("invalid data port: %v", err)
	}
}

// QEMU user-mode networking, on real packets: sockets of the QEMU user (which is how a guest's
// connections to 10.0.2.2 reach the host) get to the data port and the internet only, not the
// admin port, the apiserver, another VM's forwarded SSH port or the platform's other hosts;
// the host's own (root's) connections are untouched.
func TestUserModeFirewallTraffic(t *testing.T) {
	netnstest.Require(t)
	ctx := context.Background()
	host, remote := netnstest.Add(t, "gpc-uhost"), netnstest.Add(t, "gpc-uremote")
	netnstest.Exec(t, host, "ip", "link", "add", "uplink", "type", "veth", "peer", "name", "eth0", "netns", remote)
	netnstest.Exec(t, host, "ip", "addr", "add", "10.2.0.1/24", "dev", "uplink")
	netnstest.Exec(t, host, "ip", "addr", "add", "203.0.113.7/32", "dev", "uplink") // the host's public address: in no infra range
	netnstest.Exec(t, host, "ip", "link", "set", "uplink", "up")
	netnstest.Exec(t, host, "ip", "route", "add", "198.51.100.0/24", "via", "10.2.0.2") // "the internet"
	netnstest.Exec(t, remote, "ip", "addr", "add", "10.2.0.2/24", "dev", "eth0")
	netnstest.Exec(t, remote, "ip", "addr", "add", "198.51.100.1/32", "dev", "lo")
	netnstest.Exec(t, remote, "ip", "link", "set", "eth0", "up")
	for _, a := range []string{"127.0.0.1:7000", "0.0.0.0:7001", "127.0.0.1:8443", "127.0.0.1:22001"} {
		netnstest.Listen(t, host, a)
	}
	netnstest.ListenAs(t, host, qemuUID, "0.0.0.0:22002") // a VM's forwarded SSH port, QEMU's socket
	netnstest.Listen(t, remote, "0.0.0.0:8443")
	netnstest.Listen(t, remote, "0.0.0.0:443")
	flows := []struct {
		what, to string
		uid      int
		allowed  bool
	}{
		{"guest to its data port", "127.0.0.1:7000", qemuUID, true},
		{"guest to the internet", "198.51.100.1:443", qemuUID, true},
		{"guest to gpuserverd admin port", "127.0.0.1:7001", qemuUID, false},
		{"guest to the apiserver", "127.0.0.1:8443", qemuUID, false},
		{"guest to another VM's SSH forward", "127.0.0.1:22001", qemuUID, false},
		{"guest to the host's uplink address", "10.2.0.1:7001", qemuUID, false},
		{"guest to the host's public address", "203.0.113.7:7001", qemuUID, false},
		{"guest to another VM's SSH forward on the public address", "203.0.113.7:22002", qemuUID, false},
		{"host (root) to its public address", "203.0.113.7:7001", -1, true},
		{"guest to a remote apiserver", "10.2.0.2:8443", qemuUID, false},
		{"host (root) to the admin port", "127.0.0.1:7001", -1, true},
		{"tenant to its VM's forwarded port (QEMU replies)", "127.0.0.1:22002", -1, true},
		{"host (root) to the remote apiserver", "10.2.0.2:8443", -1, true},
	}
	// Without the firewall every flow connects (the veth may take a moment to pass traffic).
	for _, f := range flows {
		var err error
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if err = netnstest.ReachAs(host, f.uid, f.to, time.Second); err == nil {
				break
			}
		}
		if err != nil {
			t.Fatalf("no firewall, yet %s (%s) fails: %v", f.what, f.to, err)
		}
	}
	fw := &Firewall{Command: []string{"ip", "netns", "exec", host, "nft"}}
	rs := Ruleset{UserMode: &UserMode{QEMUUID: qemuUID, DataPorts: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:7000")}}}
	check := func(stage string) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make([]error, len(flows))
		for i, f := range flows {
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = netnstest.ReachAs(host, f.uid, f.to, 1500*time.Millisecond) }()
		}
		wg.Wait()
		for i, f := range flows {
			if got := errs[i] == nil; got != f.allowed {
				t.Errorf("%s: %s (%s): reached=%v (%v), want %v", stage, f.what, f.to, got, errs[i], f.allowed)
			}
		}
	}
	if _, err := fw.Reconcile(ctx, rs); err != nil {
		t.Fatal(err)
	}
	check("firewall")
	netnstest.Exec(t, host, "nft", "flush", "chain", "inet", Table, "output")
	if applied, err := fw.Reconcile(ctx, rs); err != nil || !applied {
		t.Fatalf("reconcile after drift: %v %v", applied, err)
	}
	check("after drift and reconcile")
}
