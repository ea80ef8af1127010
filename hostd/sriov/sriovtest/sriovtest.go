// Package sriovtest builds fake sysfs trees shaped like a host with Mellanox InfiniBand adapters,
// and a Fabric that records what it was asked to do, for tests of SR-IOV handling without an HCA.
package sriovtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// Tree creates, under a fresh temp dir, one IB device "mlx5_0" (PF 0000:3b:00.0, netdev ib0)
// with totalVFs possible and numVFs enabled, VFs at 0000:3b:00.1 onwards bound to mlx5_core,
// and the vfio-pci driver's bind file. It returns the sysfs root.
func Tree(t testing.TB, totalVFs, numVFs int) string {
	t.Helper()
	root := t.TempDir()
	pf := "0000:3b:00.0"
	pciDir := filepath.Join(root, "devices", "pci0000:3a", "0000:3a:00.0")
	pfDir := filepath.Join(pciDir, pf)
	must(t, os.MkdirAll(filepath.Join(pfDir, "net", "ib0"), 0o755))
	write(t, filepath.Join(pfDir, "sriov_totalvfs"), fmt.Sprintf("%d\n", totalVFs))
	write(t, filepath.Join(pfDir, "sriov_numvfs"), fmt.Sprintf("%d\n", numVFs))
	for _, drv := range []string{"mlx5_core", "vfio-pci"} {
		d := filepath.Join(root, "bus", "pci", "drivers", drv)
		must(t, os.MkdirAll(d, 0o755))
		write(t, filepath.Join(d, "bind"), "")
		write(t, filepath.Join(d, "unbind"), "")
	}
	must(t, os.MkdirAll(filepath.Join(root, "bus", "pci", "devices"), 0o755))
	must(t, os.MkdirAll(filepath.Join(root, "class", "infiniband", "mlx5_0"), 0o755))
	must(t, os.Symlink(pfDir, filepath.Join(root, "class", "infiniband", "mlx5_0", "device")))
	for i := 0; i < numVFs; i++ {
		// Eight functions per PCI device, then the next device number, as real adapters lay out VFs.
		n := i + 1
		addr := fmt.Sprintf("0000:3b:%02x.%d", n/8, n%8)
		vfDir := filepath.Join(pciDir, addr)
		must(t, os.MkdirAll(vfDir, 0o755))
		write(t, filepath.Join(vfDir, "driver_override"), "(null)\n")
		must(t, os.Symlink(filepath.Join(root, "bus", "pci", "drivers", "mlx5_core"), filepath.Join(vfDir, "driver")))
		must(t, os.Symlink("../"+addr, filepath.Join(pfDir, fmt.Sprintf("virtfn%d", i))))
		must(t, os.Symlink(vfDir, filepath.Join(root, "bus", "pci", "devices", addr)))
	}
	return root
}

// PFDir is the PF's device directory in a Tree, for tests that corrupt its files.
func PFDir(root string) string {
	return filepath.Join(root, "class", "infiniband", "mlx5_0", "device")
}

// GUIDCall is one SetVFGUIDs request.
type GUIDCall struct {
	Netdev     string
	VF         int
	Node, Port string
}

// Fabric records GUID and partition requests instead of talking netlink.
type Fabric struct {
	mu         sync.Mutex
	GUIDs      []GUIDCall
	Partitions map[string]uint16 // port GUID -> pkey
	Fail       error             // returned by every call when set
}

// SetVFGUIDs implements sriov.Fabric.
func (f *Fabric) SetVFGUIDs(_ context.Context, netdev string, vf int, node, port net.HardwareAddr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.Fail != nil {
		return f.Fail
	}
	f.GUIDs = append(f.GUIDs, GUIDCall{netdev, vf, node.String(), port.String()})
	return nil
}

// SetPartition implements sriov.Fabric.
func (f *Fabric) SetPartition(_ context.Context, port net.HardwareAddr, pkey uint16) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.Fail != nil {
		return f.Fail
	}
	if f.Partitions == nil {
		f.Partitions = map[string]uint16{}
	}
	f.Partitions[port.String()] = pkey
	return nil
}

func write(t testing.TB, path, content string) {
	t.Helper()
	must(t, os.WriteFile(path, []byte(content), 0o644))
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
