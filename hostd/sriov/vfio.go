package sriov

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// bindVFIO hands a VF to vfio-pci so QEMU can pass it through: driver_override makes vfio-pci
// the only driver that may take it, then it is unbound from its current driver and bound.
func bindVFIO(root, pci string) error {
	dev := filepath.Join(root, "bus", "pci", "devices", pci)
	if cur, err := os.Readlink(filepath.Join(dev, "driver")); err == nil && filepath.Base(cur) == "vfio-pci" {
		return nil
	}
	vfioBind := filepath.Join(root, "bus", "pci", "drivers", "vfio-pci", "bind")
	if _, err := os.Stat(vfioBind); err != nil {
		return fmt.Errorf("sriov: bind %s to vfio-pci: driver not available (is the vfio-pci module loaded?): %w", pci, err)
	}
	if err := os.WriteFile(filepath.Join(dev, "driver_override"), []byte("vfio-pci"), 0o644); err != nil {
		return fmt.Errorf("sriov: set driver_override of %s: %w", pci, err)
	}
	unbind := filepath.Join(dev, "driver", "unbind")
	if err := os.WriteFile(unbind, []byte(pci), 0o200); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("sriov: unbind %s from its driver: %w", pci, err)
	}
	if err := os.WriteFile(vfioBind, []byte(pci), 0o200); err != nil {
		return fmt.Errorf("sriov: bind %s to vfio-pci: %w", pci, err)
	}
	return nil
}
