package virt

import (
	"errors"
	"fmt"
	"net/netip"

	"libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"
)

// A VM moved from another host keeps its private address where it can: the target reserves it
// for the new domain's MAC in the tenant network's DHCP (an ip-dhcp-host entry), and the entry
// goes with the domain.

// TenantMAC is the MAC of a domain's NIC on a tenant network ("" when it has none).
func (h *Hypervisor) TenantMAC(name string) (string, error) {
	var mac string
	err := h.with(name, func(d *libvirt.Domain) error {
		x, err := d.GetXMLDesc(libvirt.DOMAIN_XML_INACTIVE)
		if err != nil {
			return fmt.Errorf("virt: XML of %s: %w", name, err)
		}
		var dom libvirtxml.Domain
		if err := dom.Unmarshal(x); err != nil {
			return fmt.Errorf("virt: parse XML of %s: %w", name, err)
		}
		if dom.Devices == nil {
			return nil
		}
		for _, nic := range dom.Devices.Interfaces {
			if nic.Source != nil && nic.Source.Network != nil && nic.MAC != nil {
				mac = nic.MAC.Address
				return nil
			}
		}
		return nil
	})
	return mac, err
}

func dhcpHostXML(mac string, ip netip.Addr) (string, error) {
	h := libvirtxml.NetworkDHCPHost{MAC: mac}
	if ip.IsValid() {
		h.IP = ip.String()
	}
	return h.Marshal()
}

// ReserveAddress has a tenant network's DHCP give ip to mac. An address outside the network,
// or one reserved for another MAC already, is refused (the VM then takes a fresh lease).
func (h *Hypervisor) ReserveAddress(n TenantNet, mac string, ip netip.Addr) error {
	if !n.Subnet.Contains(ip) || ip == n.Gateway || ip == n.Subnet.Addr() {
		return fmt.Errorf("virt: %s is no VM address of %s", ip, n.Subnet)
	}
	x, err := dhcpHostXML(mac, ip)
	if err != nil {
		return fmt.Errorf("virt: DHCP host XML: %w", err)
	}
	return h.updateDHCPHosts(n, libvirt.NETWORK_UPDATE_COMMAND_ADD_LAST, x)
}

// ReleaseAddresses drops mac's DHCP reservation from every tenant network here (none: no error).
func (h *Hypervisor) ReleaseAddresses(mac string) error {
	keys, err := h.TenantNetworks()
	if err != nil {
		return err
	}
	x, err := dhcpHostXML(mac, netip.Addr{})
	if err != nil {
		return fmt.Errorf("virt: DHCP host XML: %w", err)
	}
	var errs []error
	for _, pk := range keys {
		err := h.updateDHCPHosts(TenantNet{PartitionKey: pk}, libvirt.NETWORK_UPDATE_COMMAND_DELETE, x)
		var lerr libvirt.Error
		if errors.As(err, &lerr) && (lerr.Code == libvirt.ERR_OPERATION_INVALID || lerr.Code == libvirt.ERR_NO_SUPPORT) {
			continue // no such reservation on this network
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (h *Hypervisor) updateDHCPHosts(n TenantNet, cmd libvirt.NetworkUpdateCommand, x string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	nw, err := h.conn.LookupNetworkByName(n.Name())
	if err != nil {
		return fmt.Errorf("virt: look up network %s: %w", n.Name(), err)
	}
	defer nw.Free()
	flags := libvirt.NETWORK_UPDATE_AFFECT_CONFIG
	if active, err := nw.IsActive(); err == nil && active {
		flags |= libvirt.NETWORK_UPDATE_AFFECT_LIVE
	}
	if err := nw.Update(cmd, libvirt.NETWORK_SECTION_IP_DHCP_HOST, -1, x, flags); err != nil {
		return fmt.Errorf("virt: DHCP hosts of %s: %w", n.Name(), err)
	}
	return nil
}

// DHCPHosts lists a tenant network's DHCP reservations as mac -> address.
func (h *Hypervisor) DHCPHosts(n TenantNet) (map[string]string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	nw, err := h.conn.LookupNetworkByName(n.Name())
	if err != nil {
		return nil, fmt.Errorf("virt: look up network %s: %w", n.Name(), err)
	}
	defer nw.Free()
	x, err := nw.GetXMLDesc(0)
	if err != nil {
		return nil, fmt.Errorf("virt: XML of %s: %w", n.Name(), err)
	}
	var net libvirtxml.Network
	if err := net.Unmarshal(x); err != nil {
		return nil, fmt.Errorf("virt: parse XML of %s: %w", n.Name(), err)
	}
	out := map[string]string{}
	for _, ip := range net.IPs {
		if ip.DHCP != nil {
			for _, hst := range ip.DHCP.Hosts {
				out[hst.MAC] = hst.IP
			}
		}
	}
	return out, nil
}
