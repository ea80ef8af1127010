package virt

import (
	"encoding/xml"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"

	"libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"
)

// State is a domain's run state as hostd cares about it.
type State string

// Domain states.
const (
	Running State = "running"
	Stopped State = "stopped" // defined, not running (shut off, crashed)
	Other   State = "other"   // paused, shutting down, suspended: in transition
)

// Domain is one of hostd's domains as libvirt has it.
type Domain struct {
	Name  string
	Meta  Metadata
	State State
}

// ErrNotFound is returned for operations on a domain libvirt does not have.
var ErrNotFound = errors.New("domain not found")

// Hypervisor is a libvirt connection plus the domain type hostd creates on it.
type Hypervisor struct {
	uri        string
	domainType string

	mu        sync.Mutex // libvirt connections are thread-safe; this orders define/undefine and close
	conn      *libvirt.Connect
	callbacks []int // event callbacks, deregistered before the connection closes
}

// Open connects to libvirt at uri. domainType "" picks: "test" on the test driver, "kvm" where
// /dev/kvm opens, else "qemu" (software emulation).
func Open(uri, domainType string) (*Hypervisor, error) {
	conn, err := libvirt.NewConnect(uri)
	if err != nil {
		return nil, fmt.Errorf("virt: connect %s: %w", uri, err)
	}
	if domainType == "" {
		typ, err := conn.GetType()
		if err != nil {
			conn.Close()
			return nil, fmt.Errorf("virt: hypervisor type of %s: %w", uri, err)
		}
		switch {
		case strings.EqualFold(typ, "test"):
			domainType = "test"
		case kvmUsable():
			domainType = "kvm"
		default:
			domainType = "qemu"
		}
	}
	return &Hypervisor{uri: uri, domainType: domainType, conn: conn}, nil
}

func kvmUsable() bool {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return false
	}
	f.Close()
	return true
}

// URI is the libvirt URI in use.
func (h *Hypervisor) URI() string { return h.uri }

// DomainType is the libvirt domain type hostd creates.
func (h *Hypervisor) DomainType() string { return h.domainType }

// Close ends the connection; domains keep running.
func (h *Hypervisor) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	// A callback left registered on a closed connection is a use-after-free in libvirt.
	for _, id := range h.callbacks {
		h.conn.DomainEventDeregister(id)
	}
	h.callbacks = nil
	if _, err := h.conn.Close(); err != nil {
		return fmt.Errorf("virt: close: %w", err)
	}
	return nil
}

// NodeInfo is the host's CPU and memory as libvirt sees them.
func (h *Hypervisor) NodeInfo() (vcpus, memoryMiB int, err error) {
	ni, err := h.conn.GetNodeInfo()
	if err != nil {
		return 0, 0, fmt.Errorf("virt: node info: %w", err)
	}
	return int(ni.Cpus), int(ni.Memory / 1024), nil
}

// List returns hostd's domains: those named with NamePrefix that carry its metadata.
func (h *Hypervisor) List() ([]Domain, error) {
	doms, err := h.conn.ListAllDomains(0)
	if err != nil {
		return nil, fmt.Errorf("virt: list domains: %w", err)
	}
	var out []Domain
	for i := range doms {
		d := &doms[i]
		name, err := d.GetName()
		if err == nil && strings.HasPrefix(name, NamePrefix) {
			if m, err := readMeta(d); err == nil {
				if st, err := state(d); err == nil {
					out = append(out, Domain{Name: name, Meta: m, State: st})
				}
			}
		}
		d.Free()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func readMeta(d *libvirt.Domain) (Metadata, error) {
	raw, err := d.GetMetadata(libvirt.DOMAIN_METADATA_ELEMENT, MetadataNS, libvirt.DOMAIN_AFFECT_CONFIG)
	if err != nil {
		return Metadata{}, fmt.Errorf("virt: read metadata: %w", err)
	}
	var m Metadata
	if err := xml.Unmarshal([]byte(raw), &m); err != nil || m.InstanceID == "" {
		return Metadata{}, fmt.Errorf("virt: metadata %q is not hostd's", raw)
	}
	return m, nil
}

func state(d *libvirt.Domain) (State, error) {
	st, _, err := d.GetState()
	if err != nil {
		return "", fmt.Errorf("virt: domain state: %w", err)
	}
	switch st {
	case libvirt.DOMAIN_RUNNING, libvirt.DOMAIN_BLOCKED:
		return Running, nil
	case libvirt.DOMAIN_SHUTOFF, libvirt.DOMAIN_CRASHED, libvirt.DOMAIN_NOSTATE:
		return Stopped, nil
	default:
		return Other, nil
	}
}

// Define creates or updates the persistent domain of a spec.
func (h *Hypervisor) Define(s DomainSpec) error {
	x, err := DomainXML(s)
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	d, err := h.conn.DomainDefineXML(x)
	if err != nil {
		return fmt.Errorf("virt: define %s: %w", DomainName(s.Meta.InstanceID), err)
	}
	d.Free()
	return nil
}

// XML returns the domain's current definition.
func (h *Hypervisor) XML(name string) (string, error) {
	var out string
	err := h.with(name, func(d *libvirt.Domain) (err error) {
		out, err = d.GetXMLDesc(0)
		return err
	})
	return out, err
}

func (h *Hypervisor) with(name string, f func(*libvirt.Domain) error) error {
	d, err := h.conn.LookupDomainByName(name)
	if err != nil {
		var lerr libvirt.Error
		if errors.As(err, &lerr) && lerr.Code == libvirt.ERR_NO_DOMAIN {
			return fmt.Errorf("virt: %s: %w", name, ErrNotFound)
		}
		return fmt.Errorf("virt: look up %s: %w", name, err)
	}
	defer d.Free()
	return f(d)
}

// Start boots a defined domain.
func (h *Hypervisor) Start(name string) error {
	return h.with(name, func(d *libvirt.Domain) error {
		if err := d.Create(); err != nil {
			return fmt.Errorf("virt: start %s: %w", name, err)
		}
		return nil
	})
}

// Shutdown asks the guest to power off (ACPI); Destroy is the hard stop.
func (h *Hypervisor) Shutdown(name string) error {
	return h.with(name, func(d *libvirt.Domain) error {
		if err := d.Shutdown(); err != nil {
			return fmt.Errorf("virt: shut down %s: %w", name, err)
		}
		return nil
	})
}

// Destroy stops a domain at once.
func (h *Hypervisor) Destroy(name string) error {
	return h.with(name, func(d *libvirt.Domain) error {
		if err := d.Destroy(); err != nil {
			return fmt.Errorf("virt: destroy %s: %w", name, err)
		}
		return nil
	})
}

// Reboot restarts a running domain and records the reboot generation it answers, so the same
// request is not served twice. The reboot comes first: a hostd killed between the two reboots
// again on restart, which is harmless, rather than never.
func (h *Hypervisor) Reboot(name string, generation int64) error {
	return h.with(name, func(d *libvirt.Domain) error {
		if err := d.Reboot(libvirt.DOMAIN_REBOOT_DEFAULT); err != nil {
			// Guests without ACPI handling (a bare initramfs) ignore the request: reset them.
			if rerr := d.Reset(0); rerr != nil {
				return fmt.Errorf("virt: reboot %s: %w (reset: %v)", name, err, rerr)
			}
		}
		return setGeneration(d, generation)
	})
}

// SetRebootGeneration records the reboot generation a domain has answered.
func (h *Hypervisor) SetRebootGeneration(name string, generation int64) error {
	return h.with(name, func(d *libvirt.Domain) error { return setGeneration(d, generation) })
}

func setGeneration(d *libvirt.Domain, generation int64) error {
	m, err := readMeta(d)
	if err != nil {
		return err
	}
	m.RebootGeneration = generation
	raw, err := m.encode()
	if err != nil {
		return err
	}
	flags := libvirt.DOMAIN_AFFECT_CONFIG
	if active, err := d.IsActive(); err == nil && active {
		flags |= libvirt.DOMAIN_AFFECT_LIVE
	}
	if err := d.SetMetadata(libvirt.DOMAIN_METADATA_ELEMENT, raw, "gpucloud", MetadataNS, flags); err != nil {
		return fmt.Errorf("virt: record reboot generation: %w", err)
	}
	return nil
}

// Undefine removes a domain's definition, destroying it first if it runs. A missing domain is
// not an error: undefine is how hostd converges on "gone".
func (h *Hypervisor) Undefine(name string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	err := h.with(name, func(d *libvirt.Domain) error {
		if active, err := d.IsActive(); err == nil && active {
			if err := d.Destroy(); err != nil {
				return fmt.Errorf("virt: destroy %s: %w", name, err)
			}
		}
		if err := d.Undefine(); err != nil {
			return fmt.Errorf("virt: undefine %s: %w", name, err)
		}
		return nil
	})
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

// ChangeMedia points the domain's seed cdrom at a rebuilt ISO, live and in its definition, so a
// running guest sees the new seed (a renewed token) without a reboot.
func (h *Hypervisor) ChangeMedia(name, seed string) error {
	dev := fmt.Sprintf(`<disk type="file" device="cdrom"><driver name="qemu" type="raw"/><source file=%q/><target dev="sda" bus="sata"/><readonly/></disk>`, seed)
	return h.with(name, func(d *libvirt.Domain) error {
		flags := libvirt.DOMAIN_DEVICE_MODIFY_CONFIG
		if active, err := d.IsActive(); err == nil && active {
			flags |= libvirt.DOMAIN_DEVICE_MODIFY_LIVE
		}
		err := d.UpdateDeviceFlags(dev, flags|libvirt.DOMAIN_DEVICE_MODIFY_FORCE)
		var lerr libvirt.Error
		if errors.As(err, &lerr) && lerr.Code == libvirt.ERR_NO_SUPPORT {
			// Drivers without live device updates (the test driver) get the new seed in the
			// definition: it takes effect at the next boot.
			err = h.redefineSeed(d, seed)
		}
		if err != nil {
			return fmt.Errorf("virt: change seed media of %s: %w", name, err)
		}
		return nil
	})
}

func (h *Hypervisor) redefineSeed(d *libvirt.Domain, seed string) error {
	raw, err := d.GetXMLDesc(libvirt.DOMAIN_XML_INACTIVE)
	if err != nil {
		return err
	}
	var dx libvirtxml.Domain
	if err := dx.Unmarshal(raw); err != nil {
		return err
	}
	for i := range dx.Devices.Disks {
		if disk := &dx.Devices.Disks[i]; disk.Device == "cdrom" {
			disk.Source = &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: seed}}
		}
	}
	out, err := dx.Marshal()
	if err != nil {
		return err
	}
	nd, err := h.conn.DomainDefineXML(out)
	if err != nil {
		return err
	}
	return nd.Free()
}

// InactiveXML returns the domain's persistent definition (what the next boot uses).
func (h *Hypervisor) InactiveXML(name string) (string, error) {
	var out string
	err := h.with(name, func(d *libvirt.Domain) (err error) {
		out, err = d.GetXMLDesc(libvirt.DOMAIN_XML_INACTIVE)
		return err
	})
	return out, err
}
