// Package virt runs gpucloud instances as libvirt domains: domain XML built from the instance
// spec, lifecycle (define, start, stop, reboot, undefine), the qcow2 overlays they boot from, and
// discovery of hostd's own domains by name prefix and metadata, so a restarted hostd finds them
// and leaves every other domain on the host alone.
package virt

import (
	"encoding/xml"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strings"

	"libvirt.org/go/libvirtxml"

	"gpucloud/hostd/sriov"
)

// MetadataNS names hostd's element in a domain's <metadata>.
const MetadataNS = "https://gpucloud.dev/xmlns/hostd/1"

// NamePrefix starts the name of every domain hostd owns.
const NamePrefix = "gpucloud-"

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$`)

// ValidID reports whether an instance id can name a domain and a directory.
func ValidID(id string) error {
	if !idPattern.MatchString(id) {
		return fmt.Errorf("instance id %q: want 1-63 letters, digits, '-' or '_'", id)
	}
	return nil
}

// DomainName is the libvirt name of an instance's domain.
func DomainName(instanceID string) string { return NamePrefix + instanceID }

// Metadata is what hostd keeps inside each domain: with the domain itself it is hostd's only
// record of an instance, so nothing is lost when hostd dies.
type Metadata struct {
	XMLName          xml.Name `xml:"instance"`
	InstanceID       string   `xml:"id"`
	TenantID         string   `xml:"tenant"`
	RebootGeneration int64    `xml:"reboot-generation"`
	VFPCIAddress     string   `xml:"vf,omitempty"`
	// Forwards are the host ports hostd gave this VM's guest ports (22 first: SSH).
	Forwards []Forward `xml:"forward,omitempty"`
}

// Forward is a host TCP port forwarded to a guest port.
type Forward struct {
	Guest int `xml:"guest,attr" json:"guest_port"`
	Host  int `xml:"host,attr" json:"host_port"`
}

func (m Metadata) encode() (string, error) {
	b, err := xml.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("virt: encode metadata: %w", err)
	}
	return string(b), nil
}

// KernelBoot boots a kernel and initramfs directly instead of from the disk.
type KernelBoot struct {
	Kernel, Initrd, Cmdline string
}

// Network says where the VM's virtio NIC goes.
type Network struct {
	Kind string // "network" (a libvirt network), "bridge", "user" (QEMU user-mode networking), or "tenant" (DomainSpec.Tenant's network, filtered)
	Name string // network or bridge name
	// ForwardBind is the host address forwarded ports listen on (user networking): 0.0.0.0 to
	// be reachable from outside the host, 127.0.0.1 for tests and a local stack.
	ForwardBind string
}

// DomainSpec is everything a domain is made of.
type DomainSpec struct {
	Meta         Metadata
	Type         string // libvirt domain type: kvm, qemu, or test
	VCPUs        int
	MemoryMiB    int
	Disk         string // qcow2 overlay
	Seed         string // NoCloud ISO, attached as a cdrom
	ConsoleLog   string // serial console output
	VFPCIAddress string // InfiniBand VF passed through, or ""
	Network      Network
	Kernel       *KernelBoot
	Shmem        *Shmem // the VM's ivshmem channel to a gpuserverd on this host, or nil
	// Tenant is the VM's tenant network (Network.Kind "tenant"), and GPUServer the one
	// infrastructure endpoint its filter lets it reach (zero: none).
	Tenant    *TenantNet
	GPUServer netip.AddrPort
	// RunAs is the user and group QEMU runs this domain as (a static DAC label, whatever
	// qemu.conf says); nil: qemu.conf's. hostd's user-mode filter matches QEMU's sockets by
	// this uid, so it must be the one QEMU really has.
	RunAs *RunAs
}

// RunAs is a numeric user and group; never root (a filter on root's sockets would cut the host off).
type RunAs struct{ UID, GID uint32 }

// seclabel is libvirt's static DAC label for r: QEMU runs as +UID:+GID (numbers, not names, so
// nothing is looked up again), and libvirt gives that user the domain's files while it runs.
func (r RunAs) seclabel() libvirtxml.DomainSecLabel {
	return libvirtxml.DomainSecLabel{Type: "static", Model: "dac", Relabel: "yes", Label: fmt.Sprintf("+%d:+%d", r.UID, r.GID)}
}

// Shmem is an ivshmem-plain PCI device whose BAR 2 is the host file /dev/shm/<Name>: libvirt puts
// it there (and refuses a name with '/'); hostd creates the file first with the right owner and
// mode, so QEMU opens it rather than making one of its own.
type Shmem struct {
	Name  string
	Bytes uint64 // a power of two (a PCI BAR)
}

func (m *Shmem) validate() error {
	var errs []error
	if m.Name == "" || strings.ContainsAny(m.Name, "/\x00") || m.Name == "." || m.Name == ".." {
		errs = append(errs, fmt.Errorf("shmem name %q: want a file name, no '/'", m.Name))
	}
	if m.Bytes < 1<<20 || m.Bytes&(m.Bytes-1) != 0 {
		errs = append(errs, fmt.Errorf("shmem size %d: want a power of two of at least 1 MiB", m.Bytes))
	}
	return errors.Join(errs...)
}

// Validate checks a spec before anything is built from it.
func (s DomainSpec) Validate() error {
	var errs []error
	if err := ValidID(s.Meta.InstanceID); err != nil {
		errs = append(errs, err)
	}
	if s.VCPUs < 1 || s.VCPUs > 512 {
		errs = append(errs, fmt.Errorf("vcpus %d out of range 1-512", s.VCPUs))
	}
	if s.MemoryMiB < 64 || s.MemoryMiB > 16<<20 {
		errs = append(errs, fmt.Errorf("memory %d MiB out of range 64 MiB-16 TiB", s.MemoryMiB))
	}
	if s.Disk == "" || s.Seed == "" || s.ConsoleLog == "" {
		errs = append(errs, errors.New("disk, seed and console log paths are required"))
	}
	if s.VFPCIAddress != "" {
		if _, _, _, _, err := sriov.PCIParts(s.VFPCIAddress); err != nil {
			errs = append(errs, err)
		}
	}
	if s.Shmem != nil {
		if err := s.Shmem.validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if s.RunAs != nil && (s.RunAs.UID == 0 || s.RunAs.GID == 0) {
		errs = append(errs, fmt.Errorf("run-as %d:%d: want a user and group other than root", s.RunAs.UID, s.RunAs.GID))
	}
	switch s.Type {
	case "kvm", "qemu", "test":
	default:
		errs = append(errs, fmt.Errorf("domain type %q: want kvm, qemu or test", s.Type))
	}
	switch s.Network.Kind {
	case "user", "":
	case "tenant":
		if s.Tenant == nil {
			errs = append(errs, errors.New("tenant network kind needs the tenant's network"))
		}
	case "network", "bridge":
		if s.Network.Name == "" {
			errs = append(errs, fmt.Errorf("%s network needs a name", s.Network.Kind))
		}
	default:
		errs = append(errs, fmt.Errorf("network kind %q: want network, bridge, user or tenant", s.Network.Kind))
	}
	if s.Network.ForwardBind != "" && net.ParseIP(s.Network.ForwardBind) == nil {
		errs = append(errs, fmt.Errorf("forward bind address %q is not an IP address", s.Network.ForwardBind))
	}
	for _, f := range s.Meta.Forwards {
		if f.Guest < 1 || f.Guest > 65535 || f.Host < 1 || f.Host > 65535 {
			errs = append(errs, fmt.Errorf("forward %d->%d: ports must be 1-65535", f.Host, f.Guest))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("virt: invalid domain spec: %w", err)
	}
	return nil
}

// userNetdev is QEMU's -netdev of a user-mode NIC with a hostfwd per forward.
func userNetdev(bind string, fw []Forward) string {
	if bind == "" {
		bind = "0.0.0.0"
	}
	out := "user,id=gpcnet"
	for _, f := range fw {
		out += fmt.Sprintf(",hostfwd=tcp:%s:%d-:%d", bind, f.Host, f.Guest)
	}
	return out
}

// DomainXML renders the spec as libvirt domain XML.
func DomainXML(s DomainSpec) (string, error) {
	if err := s.Validate(); err != nil {
		return "", err
	}
	meta, err := s.Meta.encode()
	if err != nil {
		return "", err
	}
	// Prefixed so libvirt files it under our namespace (GetMetadata looks it up by URI).
	meta = fmt.Sprintf(`<gpucloud:instance xmlns:gpucloud="%s">%s</gpucloud:instance>`, MetadataNS,
		meta[len("<instance>"):len(meta)-len("</instance>")])
	d := &libvirtxml.Domain{
		Type:     s.Type,
		Name:     DomainName(s.Meta.InstanceID),
		Metadata: &libvirtxml.DomainMetadata{XML: meta},
		Memory:   &libvirtxml.DomainMemory{Value: uint(s.MemoryMiB), Unit: "MiB"},
		VCPU:     &libvirtxml.DomainVCPU{Value: uint(s.VCPUs)},
		OS:       &libvirtxml.DomainOS{Type: &libvirtxml.DomainOSType{Arch: "x86_64", Type: "hvm"}},
		OnReboot: "restart",
		Devices:  &libvirtxml.DomainDeviceList{},
	}
	if s.Type != "test" {
		d.OS.Type.Machine = "q35"
		d.Features = &libvirtxml.DomainFeatureList{ACPI: &libvirtxml.DomainFeature{}}
	}
	if s.RunAs != nil {
		d.SecLabel = []libvirtxml.DomainSecLabel{s.RunAs.seclabel()}
	}
	if k := s.Kernel; k != nil {
		d.OS.Kernel, d.OS.Initrd, d.OS.Cmdline = k.Kernel, k.Initrd, k.Cmdline
	}
	d.Devices.Disks = []libvirtxml.DomainDisk{
		{
			Device: "disk",
			Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "qcow2"},
			Source: &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: s.Disk}},
			Target: &libvirtxml.DomainDiskTarget{Dev: "vda", Bus: "virtio"},
		},
		{
			Device:   "cdrom",
			Driver:   &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "raw"},
			Source:   &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: s.Seed}},
			Target:   &libvirtxml.DomainDiskTarget{Dev: "sda", Bus: "sata"},
			ReadOnly: &libvirtxml.DomainDiskReadOnly{},
		},
	}
	nic := libvirtxml.DomainInterface{
		Model:  &libvirtxml.DomainInterfaceModel{Type: "virtio"},
		Source: &libvirtxml.DomainInterfaceSource{},
	}
	switch s.Network.Kind {
	case "network":
		nic.Source.Network = &libvirtxml.DomainInterfaceSourceNetwork{Network: s.Network.Name}
	case "bridge":
		nic.Source.Bridge = &libvirtxml.DomainInterfaceSourceBridge{Bridge: s.Network.Name}
	case "tenant":
		nic.Source.Network = &libvirtxml.DomainInterfaceSourceNetwork{Network: s.Tenant.Name()}
		nic.FilterRef = s.Tenant.FilterRef(s.GPUServer)
	default:
		nic.Source.User = &libvirtxml.DomainInterfaceSourceUser{}
	}
	d.Devices.Interfaces = []libvirtxml.DomainInterface{nic}
	if s.Network.Kind == "user" && len(s.Meta.Forwards) > 0 {
		// libvirt 9 forwards ports of a user NIC only with the passt backend; QEMU's own slirp
		// does it with hostfwd, so the NIC is given to QEMU directly.
		d.Devices.Interfaces = nil
		d.QEMUCommandline = &libvirtxml.DomainQEMUCommandline{Args: []libvirtxml.DomainQEMUCommandlineArg{
			{Value: "-netdev"}, {Value: userNetdev(s.Network.ForwardBind, s.Meta.Forwards)},
			// An address of its own: libvirt numbers its devices from slot 1 up, and QEMU would give
			// this one the first free slot before libvirt's root ports claim theirs.
			{Value: "-device"}, {Value: "virtio-net-pci,netdev=gpcnet,bus=pcie.0,addr=0x10"},
		}}
	}
	// The serial console is a pty (hostd attaches to it for interactive sessions, OpenConsole)
	// whose output is also appended to the console log, which is read whether or not anyone is
	// attached.
	port := uint(0)
	d.Devices.Serials = []libvirtxml.DomainSerial{{
		Source: &libvirtxml.DomainChardevSource{Pty: &libvirtxml.DomainChardevSourcePty{}},
		Target: &libvirtxml.DomainSerialTarget{Port: &port},
		Log:    &libvirtxml.DomainChardevLog{File: s.ConsoleLog, Append: "on"},
	}}
	if s.VFPCIAddress != "" {
		dom, bus, slot, fn, _ := sriov.PCIParts(s.VFPCIAddress)
		d.Devices.Hostdevs = []libvirtxml.DomainHostdev{{
			// hostd binds the VF to vfio-pci itself (sriov.Pool), so libvirt must not rebind it.
			Managed: "no",
			SubsysPCI: &libvirtxml.DomainHostdevSubsysPCI{
				Driver: &libvirtxml.DomainHostdevSubsysPCIDriver{Name: "vfio"},
				Source: &libvirtxml.DomainHostdevSubsysPCISource{
					Address: &libvirtxml.DomainAddressPCI{Domain: &dom, Bus: &bus, Slot: &slot, Function: &fn},
				},
			},
		}}
	}
	if m := s.Shmem; m != nil {
		d.Devices.Shmems = []libvirtxml.DomainShmem{{
			Name:  m.Name,
			Model: &libvirtxml.DomainShmemModel{Type: "ivshmem-plain"},
			Size:  &libvirtxml.DomainShmemSize{Value: uint(m.Bytes >> 10), Unit: "KiB"},
		}}
	}
	out, err := d.Marshal()
	if err != nil {
		return "", fmt.Errorf("virt: marshal domain XML: %w", err)
	}
	return out, nil
}
