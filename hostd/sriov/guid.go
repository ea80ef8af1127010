package sriov

import (
	"crypto/sha256"
	"net"
)

// GUIDs derives an instance's node and port GUIDs from its id, so a restarted hostd (or another
// host after migration) gives the VM the same identity on the fabric without keeping state.
// Bit 1 of the first byte marks them locally administered, bit 0 clear keeps them unicast.
func GUIDs(instanceID string) (node, port net.HardwareAddr) {
	return deriveGUID("node", instanceID), deriveGUID("port", instanceID)
}

func deriveGUID(kind, id string) net.HardwareAddr {
	sum := sha256.Sum256([]byte("gpucloud-ib-" + kind + "-guid\x00" + id))
	g := make(net.HardwareAddr, 8)
	copy(g, sum[:8])
	g[0] = (g[0] | 0x02) &^ 0x01
	return g
}
