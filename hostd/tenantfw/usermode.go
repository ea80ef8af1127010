package tenantfw

import (
	"fmt"
	"net/netip"
	"strings"
)

// UserMode is QEMU user-mode networking (hostd --network user). QEMU opens every connection its
// guest makes itself, as the QEMU user: 10.0.2.2 is the host's loopback, so without this a
// guest reaches the apiserver, gpuserverd's admin port and other VMs' forwarded ports. The
// output chain lets sockets of QEMU's user open nothing on the host's own addresses or the platform's
// networks but the GPU servers' data ports (and DNS, which slirp forwards to the host's
// resolver); the internet stays reachable. QEMU must run as a user of its own, never root.
type UserMode struct {
	QEMUUID   uint32
	DataPorts []netip.AddrPort
}

func (u UserMode) validate() error {
	if u.QEMUUID == 0 {
		return fmt.Errorf("tenantfw: user_mode.qemu_uid 0: QEMU must run as a user of its own (filtering root's sockets would cut the host off)")
	}
	for j, dp := range u.DataPorts {
		if !dp.IsValid() || !dp.Addr().Is4() || dp.Port() == 0 {
			return fmt.Errorf("tenantfw: user_mode.data_ports[%d] %q: want IPv4:port", j, dp)
		}
	}
	return nil
}

// userModeChain filters the sockets of QEMU's user; u must be valid.
func userModeChain(b *strings.Builder, line func(string, ...any), u UserMode, infra []netip.Prefix) {
	b.WriteString("\tchain output {\n\t\ttype filter hook output priority filter; policy accept;\n")
	line("meta skuid != %d accept", u.QEMUUID)
	line("ct state established,related accept") // replies on forwarded ports (hostfwd), open connections
	line("udp dport 53 accept")
	line("tcp dport 53 accept")
	for _, dp := range sortedPorts(u.DataPorts) {
		line("ip daddr %s tcp dport %d accept", dp.Addr(), dp.Port())
	}
	line("ip daddr 127.0.0.0/8 drop")
	// Every other address of the host too: a public one is in no infra range, yet hostd's
	// console and transfer ports, the apiserver or other VMs' forwards (bound to 0.0.0.0) listen there.
	line("fib daddr type local drop")
	line("ip daddr %s drop", infraSet(infra))
	line("ip6 daddr { ::1, fc00::/7, fe80::/10 } drop")
	line("accept")
	b.WriteString("\t}\n")
}
