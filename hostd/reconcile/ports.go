package reconcile

import (
	"fmt"

	"gpucloud/api"
	"gpucloud/hostd/virt"
)

// PortRange is the host TCP ports hostd hands to VMs' forwarded guest ports (SSH and the
// tenant's extra ports), First..Last inclusive; zero: no forwarding.
type PortRange struct{ First, Last int }

func (p PortRange) enabled() bool { return p.First > 0 && p.Last >= p.First }

// sshPort is the guest port every VM's first forward goes to.
const sshPort = 22

// allocateForwards gives the instance's guest ports (22, then its extra ones) host ports from the
// range that no domain of this host holds. Domains are hostd's record of what is taken, so a
// restarted hostd never hands out a port twice.
func (r *Reconciler) allocateForwards(d api.DesiredInstance) ([]virt.Forward, error) {
	pr := r.cfg.Ports
	if !pr.enabled() || (r.cfg.Network.Kind != "user" && r.cfg.Network.Kind != "tenant") {
		return nil, nil // a shared bridge or libvirt network: the operator's own routing
	}
	doms, err := r.cfg.Hypervisor.List()
	if err != nil {
		return nil, err
	}
	taken := map[int]bool{}
	for _, dom := range doms {
		for _, f := range dom.Meta.Forwards {
			taken[f.Host] = true
		}
	}
	guests := append([]int{sshPort}, d.Spec.ForwardPorts...)
	out := make([]virt.Forward, 0, len(guests))
	next := pr.First
	for _, g := range guests {
		for next <= pr.Last && taken[next] {
			next++
		}
		if next > pr.Last {
			return nil, fmt.Errorf("no free host port in %d-%d for guest port %d", pr.First, pr.Last, g)
		}
		out = append(out, virt.Forward{Guest: g, Host: next})
		taken[next] = true
	}
	return out, nil
}

// observedForwards is what the apiserver shows of a domain's forwards.
func (r *Reconciler) observedForwards(m virt.Metadata) []api.PortForward {
	out := make([]api.PortForward, 0, len(m.Forwards))
	for _, f := range m.Forwards {
		out = append(out, api.PortForward{GuestPort: f.Guest, HostPort: f.Host})
	}
	return out
}

// consoleTailBytes is how much of the serial log each report carries (the API serves it).
const consoleTailBytes = 8192
