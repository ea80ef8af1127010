package virt_test

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"gpucloud/hostd/virt"
)

// A tenant network's DHCP reservations: one per MAC inside the subnet, refused outside it or on
// the gateway; released from every tenant network, and releasing one that is not there is no error.
func TestReserveAndReleaseAddresses(t *testing.T) {
	node := filepath.Join(t.TempDir(), "node.xml")
	if err := os.WriteFile(node, []byte(`<node><cpu><mhz>2000</mhz><model>i686</model><nodes>1</nodes><sockets>1</sockets>
<cores>2</cores><threads>1</threads></cpu><memory>4194304</memory></node>`), 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := virt.Open("test://"+node, "")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	n, _ := virt.TenantNetwork(7)
	if err := h.EnsureTenantNetwork(n); err != nil {
		t.Fatal(err)
	}
	ip := netip.MustParseAddr("10.128.7.40")
	if err := h.ReserveAddress(n, "52:54:00:00:00:01", ip); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"10.128.8.40", "10.128.7.1", "10.128.7.0"} {
		if err := h.ReserveAddress(n, "52:54:00:00:00:02", netip.MustParseAddr(bad)); err == nil {
			t.Errorf("reserved %s on %s", bad, n.Subnet)
		}
	}
	if got, err := h.DHCPHosts(n); err != nil || len(got) != 1 || got["52:54:00:00:00:01"] != ip.String() {
		t.Fatalf("reservations %v %v", got, err)
	}
	for range 2 { // the second finds nothing to release
		if err := h.ReleaseAddresses("52:54:00:00:00:01"); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := h.DHCPHosts(n); err != nil || len(got) != 0 {
		t.Fatalf("after release: %v %v", got, err)
	}
	if err := h.ReleaseAddresses("52:54:00:00:00:09"); err != nil {
		t.Fatalf("releasing a MAC never reserved: %v", err)
	}
}
