package sriov

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Device is one InfiniBand adapter (a physical function) able to offer SR-IOV VFs.
type Device struct {
	Name       string // IB device name, e.g. mlx5_0
	PCIAddress string // of the physical function
	Netdev     string // the PF's network interface (IPoIB), through which netlink sets VF GUIDs
	TotalVFs   int
	NumVFs     int
	VFs        []VF
}

// VF is one virtual function of a Device.
type VF struct {
	Device     string // parent IB device name
	Index      int    // N of virtfnN: the VF number netlink expects
	PCIAddress string
}

// Discover lists the SR-IOV capable InfiniBand devices under a sysfs root (normally /sys). A
// host without InfiniBand has no /sys/class/infiniband and gets an empty list, not an error.
// Any malformed file is an error that names it; Discover only reads.
func Discover(sysfsRoot string) ([]Device, error) {
	classDir := filepath.Join(sysfsRoot, "class", "infiniband")
	entries, err := os.ReadDir(classDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sriov: list %s: %w", classDir, err)
	}
	var devs []Device
	for _, e := range entries {
		d, ok, err := readDevice(filepath.Join(classDir, e.Name()), e.Name())
		if err != nil {
			return nil, fmt.Errorf("sriov: device %s: %w", e.Name(), err)
		}
		if ok {
			devs = append(devs, d)
		}
	}
	sort.Slice(devs, func(i, j int) bool { return devs[i].Name < devs[j].Name })
	return devs, nil
}

// readDevice reads one /sys/class/infiniband/<name>; ok is false for a device without SR-IOV
// (no sriov_totalvfs), which includes VFs themselves when the host driver sees them.
func readDevice(classEntry, name string) (Device, bool, error) {
	devDir := filepath.Join(classEntry, "device")
	total, err := os.ReadFile(filepath.Join(devDir, "sriov_totalvfs"))
	if errors.Is(err, fs.ErrNotExist) {
		return Device{}, false, nil
	}
	if err != nil {
		return Device{}, false, fmt.Errorf("read sriov_totalvfs: %w", err)
	}
	d := Device{Name: name}
	if d.TotalVFs, err = parseCount("sriov_totalvfs", string(total)); err != nil {
		return Device{}, false, err
	}
	num, err := os.ReadFile(filepath.Join(devDir, "sriov_numvfs"))
	if err != nil {
		return Device{}, false, fmt.Errorf("read sriov_numvfs: %w", err)
	}
	if d.NumVFs, err = parseCount("sriov_numvfs", string(num)); err != nil {
		return Device{}, false, err
	}
	if d.NumVFs > d.TotalVFs {
		return Device{}, false, fmt.Errorf("sriov_numvfs %d exceeds sriov_totalvfs %d", d.NumVFs, d.TotalVFs)
	}
	target, err := filepath.EvalSymlinks(devDir)
	if err != nil {
		return Device{}, false, fmt.Errorf("resolve device link: %w", err)
	}
	if d.PCIAddress, err = parsePCIAddress(filepath.Base(target)); err != nil {
		return Device{}, false, fmt.Errorf("device link: %w", err)
	}
	if nets, err := os.ReadDir(filepath.Join(devDir, "net")); err == nil && len(nets) > 0 {
		d.Netdev = nets[0].Name()
	}
	if d.VFs, err = readVFs(devDir, name); err != nil {
		return Device{}, false, err
	}
	if len(d.VFs) != d.NumVFs {
		return Device{}, false, fmt.Errorf("sriov_numvfs says %d VFs but %d virtfn links exist", d.NumVFs, len(d.VFs))
	}
	return d, true, nil
}

func readVFs(devDir, name string) ([]VF, error) {
	entries, err := os.ReadDir(devDir)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", devDir, err)
	}
	var vfs []VF
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "virtfn") {
			continue
		}
		idx, err := parseVirtfnIndex(e.Name())
		if err != nil {
			return nil, err
		}
		link, err := os.Readlink(filepath.Join(devDir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", e.Name(), err)
		}
		addr, err := parsePCIAddress(filepath.Base(link))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", e.Name(), err)
		}
		vfs = append(vfs, VF{Device: name, Index: idx, PCIAddress: addr})
	}
	sort.Slice(vfs, func(i, j int) bool { return vfs[i].Index < vfs[j].Index })
	return vfs, nil
}
