package reconcile

import (
	"context"
	"fmt"
	"net/netip"

	"gpucloud/api"
	"gpucloud/hostd/tenantfw"
	"gpucloud/hostd/virt"
)

// tenantRuleset is the firewall's desired state: every tenant with an instance on this host
// that is not being deleted, with the GPU server data ports its instances were granted and the
// host ports forwarded to them (forwards, by instance id). A tenant whose last instance goes
// leaves the ruleset, and its rules go with it.
func (r *Reconciler) tenantRuleset(desired []api.DesiredInstance, forwards map[string][]tenantfw.PortForward) tenantfw.Ruleset {
	byKey := map[uint16]*tenantfw.Tenant{}
	var order []uint16
	for _, d := range desired {
		if d.DesiredState == api.DesiredDeleted {
			continue
		}
		n, err := virt.TenantNetwork(d.PartitionKey)
		if err != nil {
			continue // the instance fails validation and gets no network either
		}
		t, ok := byKey[d.PartitionKey]
		if !ok {
			t = &tenantfw.Tenant{Bridge: n.Bridge(), Subnet: n.Subnet, Gateway: n.Gateway}
			byKey[d.PartitionKey] = t
			order = append(order, d.PartitionKey)
		}
		t.Forwards = append(t.Forwards, forwards[d.ID]...)
		if d.GPU != nil {
			for _, e := range d.GPU.Endpoints {
				if ap, err := netip.ParseAddrPort(e); err == nil && ap.Addr().Is4() && ap.Port() != 0 {
					t.DataPorts = append(t.DataPorts, ap)
				}
			}
		}
	}
	rs := tenantfw.Ruleset{Infra: r.cfg.FirewallInfra}
	if a, err := netip.ParseAddr(r.cfg.Network.ForwardBind); err == nil {
		rs.ForwardAddr = a
	}
	for _, k := range order {
		rs.Tenants = append(rs.Tenants, *byKey[k])
	}
	// A data port inside a tenant network would open that network to others: such a grant
	// (a bad or hostile one) is left out rather than failing every tenant's firewall.
	for i := range rs.Tenants {
		kept := rs.Tenants[i].DataPorts[:0]
		for _, dp := range rs.Tenants[i].DataPorts {
			if inTenantNet(rs.Tenants, dp.Addr()) {
				r.log.Warn("GPU endpoint inside a tenant network left out of the firewall", "endpoint", dp)
				continue
			}
			kept = append(kept, dp)
		}
		rs.Tenants[i].DataPorts = kept
	}
	return rs
}

func inTenantNet(ts []tenantfw.Tenant, a netip.Addr) bool {
	for _, t := range ts {
		if t.Subnet.Contains(a) {
			return true
		}
	}
	return false
}

// tenantForwards are the host ports forwarded to running VMs on tenant networks, by instance id,
// as the firewall's DNAT needs them: a VM's forwards (allocated when its domain was defined)
// join the ruleset once its network has leased it an address, and leave with the lease.
func (r *Reconciler) tenantForwards(desired []api.DesiredInstance) (map[string][]tenantfw.PortForward, error) {
	doms, err := r.cfg.Hypervisor.List()
	if err != nil {
		return nil, err
	}
	byID := map[string]api.DesiredInstance{}
	for _, d := range desired {
		byID[d.ID] = d
	}
	out := map[string][]tenantfw.PortForward{}
	for _, dom := range doms {
		d, ok := byID[dom.Meta.InstanceID]
		if !ok || d.DesiredState == api.DesiredDeleted || dom.State != virt.Running || len(dom.Meta.Forwards) == 0 {
			continue
		}
		vm, err := netip.ParseAddr(r.privateAddress(d, dom.Name))
		if err != nil {
			continue // no lease yet
		}
		for _, f := range dom.Meta.Forwards {
			out[d.ID] = append(out[d.ID], tenantfw.PortForward{HostPort: uint16(f.Host), VM: vm, GuestPort: uint16(f.Guest)})
		}
	}
	return out, nil
}

// slirpHost is the address a user-mode guest reaches the host's loopback at.
var slirpHost = netip.MustParseAddr("10.0.2.2")

// userModeRuleset filters the sockets of QEMU's user: its guests' connections to the GPU
// servers' data ports (10.0.2.2 is the host's 127.0.0.1) and the internet, nothing else.
func (r *Reconciler) userModeRuleset(desired []api.DesiredInstance) tenantfw.Ruleset {
	u := &tenantfw.UserMode{QEMUUID: r.cfg.QEMUUID}
	for _, d := range desired {
		if d.GPU == nil || d.DesiredState == api.DesiredDeleted {
			continue
		}
		for _, e := range d.GPU.Endpoints {
			ap, err := netip.ParseAddrPort(e)
			if err != nil || !ap.Addr().Is4() || ap.Port() == 0 {
				continue
			}
			if ap.Addr() == slirpHost {
				ap = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), ap.Port())
			}
			u.DataPorts = append(u.DataPorts, ap)
		}
	}
	return tenantfw.Ruleset{UserMode: u, Infra: r.cfg.FirewallInfra}
}

// reconcileFirewall applies the host firewall before any VM is defined or started, so no VM
// runs on a network its rules do not cover yet: the tenant firewall with tenant networking,
// the QEMU user's filter with user-mode networking (when QEMUUID is set).
func (r *Reconciler) reconcileFirewall(ctx context.Context, desired []api.DesiredInstance) error {
	if r.cfg.Firewall == nil {
		return nil
	}
	var rs tenantfw.Ruleset
	switch {
	case r.cfg.Network.Kind == "tenant":
		forwards, err := r.tenantForwards(desired)
		if err != nil {
			return fmt.Errorf("reconcile: host firewall: %w", err)
		}
		rs = r.tenantRuleset(desired, forwards)
	case r.cfg.Network.Kind == "user" && r.cfg.QEMUUID != 0:
		rs = r.userModeRuleset(desired)
	default:
		return nil
	}
	applied, err := r.cfg.Firewall.Reconcile(ctx, rs)
	if err != nil {
		return fmt.Errorf("reconcile: host firewall: %w", err)
	}
	if applied {
		r.log.Info("host firewall applied", "network", r.cfg.Network.Kind, "tenants", len(rs.Tenants))
	}
	return nil
}
