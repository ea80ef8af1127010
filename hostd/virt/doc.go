// Package virt runs gpucloud instances as libvirt domains: domain XML built from the instance
// spec, lifecycle (define, start, stop, reboot, undefine) and discovery of hostd's own domains.
package virt

import (
	_ "libvirt.org/go/libvirt"
	_ "libvirt.org/go/libvirtxml"
)
