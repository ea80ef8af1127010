package reconcile

import (
	"errors"
	"net/netip"

	"gpucloud/api"
	"gpucloud/hostd/virt"
)

// tenantNetwork makes sure the instance's tenant has its network on this host and the tenant
// filter is defined, and returns the network and the GPU server data port the VM may reach.
// Only the test driver may lack nwfilter: a real host without it would leave VMs unfiltered.
func (r *Reconciler) tenantNetwork(d api.DesiredInstance) (*virt.TenantNet, netip.AddrPort, error) {
	n, err := virt.TenantNetwork(d.PartitionKey)
	if err != nil {
		return nil, netip.AddrPort{}, err
	}
	if err := r.cfg.Hypervisor.EnsureTenantFilter(); err != nil &&
		!(errors.Is(err, virt.ErrNoFilters) && r.cfg.Hypervisor.DomainType() == "test") {
		return nil, netip.AddrPort{}, err
	}
	if err := r.cfg.Hypervisor.EnsureTenantNetwork(n); err != nil {
		return nil, netip.AddrPort{}, err
	}
	var gpu netip.AddrPort
	if d.GPU != nil && len(d.GPU.Endpoints) > 0 {
		// An endpoint by name cannot be a filter address: the VM then reaches no GPU server,
		// which the guest library reports, rather than more than its own.
		gpu, _ = netip.ParseAddrPort(d.GPU.Endpoints[0])
	}
	return &n, gpu, nil
}

// privateAddress is the VM's leased address on its tenant network, "" while unknown.
func (r *Reconciler) privateAddress(d api.DesiredInstance, domain string) string {
	n, err := virt.TenantNetwork(d.PartitionKey)
	if err != nil {
		return ""
	}
	lookup := r.cfg.Hypervisor.LeasedAddress
	if r.leasedAddress != nil {
		lookup = r.leasedAddress
	}
	a, err := lookup(domain, n.Subnet)
	if err != nil || !a.IsValid() {
		return ""
	}
	return a.String()
}

// removeIdleTenantNetworks stops and undefines the networks of tenants with no instance left on
// this host (their firewall rules went in the same pass).
func (r *Reconciler) removeIdleTenantNetworks(desired []api.DesiredInstance) error {
	if r.cfg.Network.Kind != "tenant" {
		return nil
	}
	keys, err := r.cfg.Hypervisor.TenantNetworks()
	if err != nil {
		return err
	}
	wanted := map[uint16]bool{}
	for _, d := range desired {
		if d.DesiredState != api.DesiredDeleted {
			wanted[d.PartitionKey] = true
		}
	}
	var errs []error
	for _, k := range keys {
		if !wanted[k] {
			r.log.Info("removing the network of a tenant with no VM here", "partition_key", k)
			errs = append(errs, r.cfg.Hypervisor.RemoveTenantNetwork(k))
		}
	}
	return errors.Join(errs...)
}
