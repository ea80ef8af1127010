package virt

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"
)

// VolumePrefix starts the name of every storage volume hostd owns in its pool.
const VolumePrefix = "gpucloud-vol-"

var volumeDevice = regexp.MustCompile(`^vd[b-i]$`)

// VolumeName is the pool name of a volume.
func VolumeName(id string) string { return VolumePrefix + id + ".qcow2" }

// VolumeDisk is a volume as a disk of a domain.
type VolumeDisk struct {
	ID, Path, Device string
}

// serial is what the guest sees as the disk's serial (virtio keeps 20 bytes):
// /dev/disk/by-id/virtio-<serial>.
func (v VolumeDisk) serial() string {
	if len(v.ID) > 20 {
		return v.ID[:20]
	}
	return v.ID
}

func (v VolumeDisk) xml() (string, error) {
	if err := ValidID(v.ID); err != nil {
		return "", fmt.Errorf("virt: volume: %w", err)
	}
	if !volumeDevice.MatchString(v.Device) || v.Path == "" {
		return "", fmt.Errorf("virt: volume %s: device %q (want vdb..vdi) and path %q", v.ID, v.Device, v.Path)
	}
	d := libvirtxml.DomainDisk{
		Device: "disk",
		Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "qcow2"},
		Source: &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: v.Path}},
		Target: &libvirtxml.DomainDiskTarget{Dev: v.Device, Bus: "virtio"},
		Serial: v.serial(),
	}
	return d.Marshal()
}

// EnsurePool makes hostd's directory storage pool for volumes (defined, built, started,
// autostarted) unless libvirt has it already.
func (h *Hypervisor) EnsurePool(name, dir string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	p, err := h.conn.LookupStoragePoolByName(name)
	if err != nil {
		x, merr := (&libvirtxml.StoragePool{Type: "dir", Name: name, Target: &libvirtxml.StoragePoolTarget{Path: dir}}).Marshal()
		if merr != nil {
			return fmt.Errorf("virt: pool XML: %w", merr)
		}
		if p, err = h.conn.StoragePoolDefineXML(x, 0); err != nil {
			return fmt.Errorf("virt: define pool %s: %w", name, err)
		}
		if err := p.Build(0); err != nil {
			p.Free()
			return fmt.Errorf("virt: build pool %s: %w", name, err)
		}
		if err := p.SetAutostart(true); err != nil {
			p.Free()
			return fmt.Errorf("virt: autostart pool %s: %w", name, err)
		}
	}
	defer p.Free()
	if active, err := p.IsActive(); err != nil || active {
		return err
	}
	if err := p.Create(0); err != nil {
		return fmt.Errorf("virt: start pool %s: %w", name, err)
	}
	return nil
}

func (h *Hypervisor) withPool(name string, f func(*libvirt.StoragePool) error) error {
	p, err := h.conn.LookupStoragePoolByName(name)
	if err != nil {
		return fmt.Errorf("virt: look up pool %s: %w", name, err)
	}
	defer p.Free()
	return f(p)
}

// EnsureVolume creates a volume of sizeGiB (qcow2, thin) in pool unless it exists, and returns
// its path. An existing volume keeps its size and data.
func (h *Hypervisor) EnsureVolume(pool, id string, sizeGiB int) (string, error) {
	if err := ValidID(id); err != nil {
		return "", fmt.Errorf("virt: volume: %w", err)
	}
	if sizeGiB < 1 {
		return "", fmt.Errorf("virt: volume %s: size %d GiB", id, sizeGiB)
	}
	var path string
	err := h.withPool(pool, func(p *libvirt.StoragePool) error {
		v, err := p.LookupStorageVolByName(VolumeName(id))
		if err != nil {
			x, merr := (&libvirtxml.StorageVolume{Name: VolumeName(id),
				Capacity:   &libvirtxml.StorageVolumeSize{Value: uint64(sizeGiB), Unit: "GiB"},
				Allocation: &libvirtxml.StorageVolumeSize{Value: 0},
				Target:     &libvirtxml.StorageVolumeTarget{Format: &libvirtxml.StorageVolumeTargetFormat{Type: "qcow2"}},
			}).Marshal()
			if merr != nil {
				return fmt.Errorf("virt: volume XML: %w", merr)
			}
			if v, err = p.StorageVolCreateXML(x, 0); err != nil {
				return fmt.Errorf("virt: create volume %s: %w", id, err)
			}
		}
		defer v.Free()
		path, err = v.GetPath()
		if err != nil {
			return fmt.Errorf("virt: path of volume %s: %w", id, err)
		}
		return nil
	})
	return path, err
}

// RefreshPool makes libvirt read a pool's directory again (a volume's file was replaced by a
// copy from another host).
func (h *Hypervisor) RefreshPool(name string) error {
	return h.withPool(name, func(p *libvirt.StoragePool) error {
		if err := p.Refresh(0); err != nil {
			return fmt.Errorf("virt: refresh pool %s: %w", name, err)
		}
		return nil
	})
}

// Volumes lists the ids of hostd's volumes in pool, sorted.
func (h *Hypervisor) Volumes(pool string) ([]string, error) {
	var ids []string
	err := h.withPool(pool, func(p *libvirt.StoragePool) error {
		vols, err := p.ListAllStorageVolumes(0)
		if err != nil {
			return fmt.Errorf("virt: list volumes of %s: %w", pool, err)
		}
		for i := range vols {
			name, err := vols[i].GetName()
			vols[i].Free()
			if err == nil && strings.HasPrefix(name, VolumePrefix) && strings.HasSuffix(name, ".qcow2") {
				ids = append(ids, strings.TrimSuffix(strings.TrimPrefix(name, VolumePrefix), ".qcow2"))
			}
		}
		return nil
	})
	sort.Strings(ids)
	return ids, err
}

// DeleteVolume deletes a volume and its data; one already gone is no error.
func (h *Hypervisor) DeleteVolume(pool, id string) error {
	return h.withPool(pool, func(p *libvirt.StoragePool) error {
		v, err := p.LookupStorageVolByName(VolumeName(id))
		if err != nil {
			var lerr libvirt.Error
			if errors.As(err, &lerr) && lerr.Code == libvirt.ERR_NO_STORAGE_VOL {
				return nil
			}
			return fmt.Errorf("virt: look up volume %s: %w", id, err)
		}
		defer v.Free()
		if err := v.Delete(0); err != nil {
			return fmt.Errorf("virt: delete volume %s: %w", id, err)
		}
		return nil
	})
}

// VolumeDisks are the volume disks (vdb..vdi) in a domain's persistent definition.
func (h *Hypervisor) VolumeDisks(name string) ([]VolumeDisk, error) {
	x, err := h.InactiveXML(name)
	if err != nil {
		return nil, err
	}
	var d libvirtxml.Domain
	if err := d.Unmarshal(x); err != nil {
		return nil, fmt.Errorf("virt: parse %s: %w", name, err)
	}
	var out []VolumeDisk
	if d.Devices == nil {
		return nil, nil
	}
	for _, disk := range d.Devices.Disks {
		if disk.Target == nil || !volumeDevice.MatchString(disk.Target.Dev) || disk.Source == nil || disk.Source.File == nil {
			continue
		}
		out = append(out, VolumeDisk{ID: volumeIDOfPath(disk.Source.File.File), Path: disk.Source.File.File, Device: disk.Target.Dev})
	}
	return out, nil
}

func volumeIDOfPath(path string) string {
	base := path[strings.LastIndexByte(path, '/')+1:]
	return strings.TrimSuffix(strings.TrimPrefix(base, VolumePrefix), ".qcow2")
}

// AttachVolume adds a volume disk to a domain's definition (the next boot has it) and, when
// live, hotplugs it into the running domain. hotplugged is false where the driver cannot hotplug
// (libvirt's test driver): the definition is changed all the same.
func (h *Hypervisor) AttachVolume(name string, v VolumeDisk, live bool) (hotplugged bool, err error) {
	return h.changeDisk(name, v, live, true)
}

// DetachVolume removes a volume disk from a domain's definition and, when live, unplugs it.
func (h *Hypervisor) DetachVolume(name string, v VolumeDisk, live bool) (hotplugged bool, err error) {
	return h.changeDisk(name, v, live, false)
}

// changeDisk edits the persistent definition by redefining it (every driver can) and hotplugs
// through AttachDeviceFlags/DetachDeviceFlags on the live domain only.
func (h *Hypervisor) changeDisk(name string, v VolumeDisk, live, attach bool) (bool, error) {
	x, err := v.xml()
	if err != nil {
		return false, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	hotplugged := false
	err = h.with(name, func(d *libvirt.Domain) error {
		cur, err := d.GetXMLDesc(libvirt.DOMAIN_XML_INACTIVE)
		if err != nil {
			return fmt.Errorf("virt: definition of %s: %w", name, err)
		}
		var def libvirtxml.Domain
		if err := def.Unmarshal(cur); err != nil {
			return fmt.Errorf("virt: parse %s: %w", name, err)
		}
		disks := def.Devices.Disks[:0]
		for _, disk := range def.Devices.Disks {
			if disk.Target == nil || disk.Target.Dev != v.Device {
				disks = append(disks, disk)
			}
		}
		if attach {
			var disk libvirtxml.DomainDisk
			if err := disk.Unmarshal(x); err != nil {
				return fmt.Errorf("virt: volume disk XML: %w", err)
			}
			disks = append(disks, disk)
		}
		def.Devices.Disks = disks
		nx, err := def.Marshal()
		if err != nil {
			return fmt.Errorf("virt: marshal %s: %w", name, err)
		}
		nd, err := h.conn.DomainDefineXML(nx)
		if err != nil {
			return fmt.Errorf("virt: redefine %s with volume %s: %w", name, v.ID, err)
		}
		nd.Free()
		if !live {
			return nil
		}
		if attach {
			err = d.AttachDeviceFlags(x, libvirt.DOMAIN_DEVICE_MODIFY_LIVE)
		} else {
			err = d.DetachDeviceFlags(x, libvirt.DOMAIN_DEVICE_MODIFY_LIVE)
		}
		var lerr libvirt.Error
		if errors.As(err, &lerr) && lerr.Code == libvirt.ERR_NO_SUPPORT {
			return nil
		}
		if err != nil {
			return fmt.Errorf("virt: hotplug volume %s (%s) in %s: %w", v.ID, v.Device, name, err)
		}
		hotplugged = true
		return nil
	})
	return hotplugged, err
}

// RemovePool stops and undefines a pool (its volumes' files stay in its directory). For tests
// on a real libvirtd, which outlives them.
func (h *Hypervisor) RemovePool(name string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.withPool(name, func(p *libvirt.StoragePool) error {
		if active, _ := p.IsActive(); active {
			if err := p.Destroy(); err != nil {
				return fmt.Errorf("virt: stop pool %s: %w", name, err)
			}
		}
		if err := p.Undefine(); err != nil {
			return fmt.Errorf("virt: undefine pool %s: %w", name, err)
		}
		return nil
	})
}
