package sriov

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/vishvananda/netlink"
)

// Fabric applies a VF's identity on the InfiniBand side. The real one talks netlink and the
// subnet manager's partition config; tests use a recorder, because netlink needs a real HCA.
type Fabric interface {
	// SetVFGUIDs gives VF number vf of the PF behind netdev its node and port GUIDs.
	SetVFGUIDs(ctx context.Context, netdev string, vf int, node, port net.HardwareAddr) error
	// SetPartition makes the port GUID a full member of partition pkey (0x0001-0x7fff).
	SetPartition(ctx context.Context, port net.HardwareAddr, pkey uint16) error
}

// NetlinkFabric is the Fabric of a real host.
//
// GUIDs go through rtnetlink (IFLA_VF_IB_NODE_GUID / IFLA_VF_IB_PORT_GUID on the PF). Partition
// membership is not a host setting on mlx5: the subnet manager grants it by port GUID. So the
// membership is written as one file per port GUID under PartitionDir, which the operator's
// subnet-manager hook (e.g. an OpenSM partitions.conf generator) turns into configuration.
type NetlinkFabric struct {
	PartitionDir string
}

// SetVFGUIDs implements Fabric.
func (NetlinkFabric) SetVFGUIDs(_ context.Context, netdev string, vf int, node, port net.HardwareAddr) error {
	if netdev == "" {
		return fmt.Errorf("sriov: PF has no network interface to set VF %d GUIDs through", vf)
	}
	link, err := netlink.LinkByName(netdev)
	if err != nil {
		return fmt.Errorf("sriov: find PF netdev %s: %w", netdev, err)
	}
	if err := netlink.LinkSetVfNodeGUID(link, vf, node); err != nil {
		return fmt.Errorf("sriov: set node GUID of %s VF %d: %w", netdev, vf, err)
	}
	if err := netlink.LinkSetVfPortGUID(link, vf, port); err != nil {
		return fmt.Errorf("sriov: set port GUID of %s VF %d: %w", netdev, vf, err)
	}
	return nil
}

// SetPartition implements Fabric.
func (f NetlinkFabric) SetPartition(_ context.Context, port net.HardwareAddr, pkey uint16) error {
	if f.PartitionDir == "" {
		return nil // no subnet-manager hook configured: partitions are managed elsewhere
	}
	if err := os.MkdirAll(f.PartitionDir, 0o755); err != nil {
		return fmt.Errorf("sriov: partition dir: %w", err)
	}
	line := fmt.Sprintf("pkey=0x%04x guid=0x%x membership=full\n", pkey|0x8000, []byte(port))
	return writeFileAtomic(filepath.Join(f.PartitionDir, fmt.Sprintf("%x", []byte(port))), []byte(line))
}

func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename %s: %w", tmp, err)
	}
	return nil
}
