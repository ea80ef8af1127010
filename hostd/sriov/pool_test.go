package sriov_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gpucloud/hostd/sriov"
	"gpucloud/hostd/sriov/sriovtest"
)

func TestDiscoverFindsVFs(t *testing.T) {
	root := sriovtest.Tree(t, 8, 8)
	devs, err := sriov.Discover(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 1 {
		t.Fatalf("want 1 device, got %d", len(devs))
	}
	d := devs[0]
	if d.Name != "mlx5_0" || d.PCIAddress != "0000:3b:00.0" || d.Netdev != "ib0" || d.TotalVFs != 8 || d.NumVFs != 8 {
		t.Fatalf("device = %+v", d)
	}
	if len(d.VFs) != 8 || d.VFs[0].PCIAddress != "0000:3b:00.1" || d.VFs[7].PCIAddress != "0000:3b:01.0" || d.VFs[7].Index != 7 {
		t.Fatalf("VFs = %+v", d.VFs)
	}
}

func TestDiscoverWithoutInfiniBand(t *testing.T) {
	devs, err := sriov.Discover(t.TempDir())
	if err != nil || len(devs) != 0 {
		t.Fatalf("host without IB: devs=%v err=%v", devs, err)
	}
}

func TestPoolServesEightAndRefusesNinth(t *testing.T) {
	ctx := context.Background()
	root := sriovtest.Tree(t, 8, 8)
	state := t.TempDir()
	fab := &sriovtest.Fabric{}
	pool, err := sriov.NewPool(ctx, root, state, fab, true)
	if err != nil {
		t.Fatal(err)
	}
	if pool.Capacity() != 8 {
		t.Fatalf("capacity %d", pool.Capacity())
	}
	seen := map[string]string{}
	for i := 0; i < 8; i++ {
		id := fmt.Sprintf("inst-%d", i)
		a, err := pool.Allocate(ctx, id, 0x10+uint16(i))
		if err != nil {
			t.Fatalf("allocate %s: %v", id, err)
		}
		if prev, dup := seen[a.VF.PCIAddress]; dup {
			t.Fatalf("VF %s given to %s and %s", a.VF.PCIAddress, prev, id)
		}
		seen[a.VF.PCIAddress] = id
		ov, _ := os.ReadFile(filepath.Join(root, "bus", "pci", "devices", a.VF.PCIAddress, "driver_override"))
		if string(ov) != "vfio-pci" {
			t.Fatalf("driver_override of %s = %q", a.VF.PCIAddress, ov)
		}
		bound, _ := os.ReadFile(filepath.Join(root, "bus", "pci", "drivers", "vfio-pci", "bind"))
		if string(bound) != a.VF.PCIAddress {
			t.Fatalf("vfio-pci/bind = %q, want %s", bound, a.VF.PCIAddress)
		}
		if fab.Partitions[a.PortGUID.String()] != 0x10+uint16(i) {
			t.Fatalf("partition of %s not set", id)
		}
	}
	_, err = pool.Allocate(ctx, "inst-8", 0x10)
	if !errors.Is(err, sriov.ErrExhausted) || !strings.Contains(err.Error(), "all 8 VFs") || !strings.Contains(err.Error(), "inst-8") {
		t.Fatalf("ninth allocation: %v", err)
	}

	// Allocating again for a holder returns its own VF: retries never take a second one.
	again, err := pool.Allocate(ctx, "inst-3", 0x13)
	if err != nil || seen[again.VF.PCIAddress] != "inst-3" {
		t.Fatalf("re-allocate inst-3: %v %+v", err, again)
	}

	// A restarted hostd (a new pool over the same state) knows every claim.
	pool2, err := sriov.NewPool(ctx, root, state, fab, true)
	if err != nil {
		t.Fatal(err)
	}
	claims, err := pool2.Claims()
	if err != nil || len(claims) != 8 {
		t.Fatalf("claims after restart: %d %v", len(claims), err)
	}
	if err := pool2.Release("inst-5"); err != nil {
		t.Fatal(err)
	}
	freed := claims["inst-5"].VF.PCIAddress
	a, err := pool2.Allocate(ctx, "inst-8", 0x20)
	if err != nil || a.VF.PCIAddress != freed {
		t.Fatalf("after release: %+v %v, want VF %s", a, err, freed)
	}
	if err := pool2.Release("never-allocated"); err != nil {
		t.Fatalf("release of unknown instance: %v", err)
	}
}

func TestGUIDsDerivedFromInstance(t *testing.T) {
	n1, p1 := sriov.GUIDs("a")
	n2, p2 := sriov.GUIDs("a")
	n3, _ := sriov.GUIDs("b")
	if n1.String() != n2.String() || p1.String() != p2.String() {
		t.Fatal("GUIDs not deterministic")
	}
	if n1.String() == p1.String() || n1.String() == n3.String() {
		t.Fatal("GUIDs collide")
	}
	if len(n1) != 8 || n1[0]&0x01 != 0 || n1[0]&0x02 == 0 {
		t.Fatalf("node GUID %s not a local unicast EUI-64", n1)
	}
}

func TestAllocateFailureLeavesNoClaim(t *testing.T) {
	ctx := context.Background()
	root := sriovtest.Tree(t, 8, 8)
	state := t.TempDir()
	fab := &sriovtest.Fabric{Fail: errors.New("netlink: operation not supported")}
	pool, err := sriov.NewPool(ctx, root, state, fab, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Allocate(ctx, "x", 5); err == nil || !strings.Contains(err.Error(), "not supported") {
		t.Fatalf("want fabric error, got %v", err)
	}
	if _, err := pool.Allocate(ctx, "x", 0x8001); err == nil || !strings.Contains(err.Error(), "partition key") {
		t.Fatalf("want pkey range error, got %v", err)
	}
	if entries, _ := os.ReadDir(state); len(entries) != 0 {
		t.Fatalf("failed allocations left %d state files", len(entries))
	}
}

func TestMalformedSysfs(t *testing.T) {
	cases := []struct {
		name, want string
		corrupt    func(root string)
	}{
		{"numvfs not a number", "sriov_numvfs", func(r string) { rewrite(t, filepath.Join(sriovtest.PFDir(r), "sriov_numvfs"), "eight\n") }},
		{"totalvfs negative", "sriov_totalvfs", func(r string) { rewrite(t, filepath.Join(sriovtest.PFDir(r), "sriov_totalvfs"), "-1\n") }},
		{"numvfs above total", "exceeds", func(r string) { rewrite(t, filepath.Join(sriovtest.PFDir(r), "sriov_numvfs"), "9\n") }},
		{"virtfn to garbage", "PCI address", func(r string) {
			link := filepath.Join(sriovtest.PFDir(r), "virtfn3")
			os.Remove(link)
			os.Symlink("../not-a-pci-address", link)
		}},
		{"missing virtfn", "virtfn links", func(r string) { os.Remove(filepath.Join(sriovtest.PFDir(r), "virtfn7")) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := sriovtest.Tree(t, 8, 8)
			c.corrupt(root)
			numBefore, _ := os.ReadFile(filepath.Join(sriovtest.PFDir(root), "sriov_numvfs"))
			state := t.TempDir()
			_, err := sriov.NewPool(context.Background(), root, state, &sriovtest.Fabric{}, true)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "mlx5_0") {
				t.Fatalf("want error naming %q and the device, got %v", c.want, err)
			}
			numAfter, _ := os.ReadFile(filepath.Join(sriovtest.PFDir(root), "sriov_numvfs"))
			if string(numBefore) != string(numAfter) {
				t.Fatalf("sriov_numvfs changed from %q to %q", numBefore, numAfter)
			}
			if entries, _ := os.ReadDir(state); len(entries) != 0 {
				t.Fatal("state written despite malformed sysfs")
			}
		})
	}
}

func rewrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCorruptClaimIsNamed(t *testing.T) {
	ctx := context.Background()
	root := sriovtest.Tree(t, 8, 8)
	state := t.TempDir()
	pool, err := sriov.NewPool(ctx, root, state, &sriovtest.Fabric{}, false)
	if err != nil {
		t.Fatal(err)
	}
	// A leftover temp file from a killed write is ignored...
	os.WriteFile(filepath.Join(state, "0000:3b:00.1.claim.tmp"), []byte("{"), 0o644)
	if _, err := pool.Allocate(ctx, "a", 1); err != nil {
		t.Fatalf("leftover temp file broke allocation: %v", err)
	}
	// ...while a claim that is not one is an error naming it.
	os.WriteFile(filepath.Join(state, "0000:3b:00.2.claim"), []byte("garbage"), 0o644)
	if _, err := pool.Claims(); err == nil || !strings.Contains(err.Error(), "0000:3b:00.2.claim") {
		t.Fatalf("corrupt claim: %v", err)
	}
}
