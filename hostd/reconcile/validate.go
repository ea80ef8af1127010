package reconcile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"gpucloud/api"
	"gpucloud/hostd/virt"
	"gpucloud/internal/validate"
)

var imageSumPattern = regexp.MustCompile(`^[0-9a-f]{64}$`)

// validate checks a desired instance before hostd touches anything for it, and names every
// problem it finds.
func (r *Reconciler) validate(d api.DesiredInstance) error {
	if err := virt.ValidID(d.ID); err != nil {
		return err
	}
	var errs []error
	switch d.DesiredState {
	case api.DesiredDeleted:
		return nil // nothing else matters for removing it
	case api.DesiredRunning, api.DesiredStopped:
	default:
		errs = append(errs, fmt.Errorf("desired state %q: want running, stopped or deleted", d.DesiredState))
	}
	if d.TenantID == "" {
		errs = append(errs, errors.New("tenant id is empty"))
	}
	s := d.Spec
	if s.VCPUs < 1 || s.VCPUs > 512 {
		errs = append(errs, fmt.Errorf("spec.vcpus %d out of range 1-512", s.VCPUs))
	}
	if s.MemoryMiB < 64 || s.MemoryMiB > 16<<20 {
		errs = append(errs, fmt.Errorf("spec.memory_mib %d out of range 64-16777216", s.MemoryMiB))
	}
	if s.DiskGiB < 1 || s.DiskGiB > 65536 {
		errs = append(errs, fmt.Errorf("spec.disk_gib %d out of range 1-65536", s.DiskGiB))
	}
	if err := validate.Image(s.Image); err != nil {
		errs = append(errs, fmt.Errorf("spec.image: %w", err))
	} else if s.ImageSource != "" {
		if !imageSumPattern.MatchString(s.ImageSHA256) {
			errs = append(errs, fmt.Errorf("spec.image_sha256 %q: want 64 lower-case hex digits", s.ImageSHA256))
		}
	} else if _, err := os.Stat(r.baseImage(s.Image)); err != nil {
		errs = append(errs, fmt.Errorf("spec.image %q: no such base image on this host", s.Image))
	}
	if r.cfg.VFs != nil && r.cfg.VFs.Capacity() > 0 && (d.PartitionKey == 0 || d.PartitionKey > 0x7fff) {
		errs = append(errs, fmt.Errorf("partition_key 0x%04x out of range 0x0001-0x7fff", d.PartitionKey))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid instance: %w", err)
	}
	return nil
}

func (r *Reconciler) baseImage(name string) string {
	return filepath.Join(r.cfg.ImagesDir, name+".qcow2")
}

// imageKernel is the direct-boot kernel shipped next to a base image, as deploy/guest-image
// builds them (<image>.vmlinuz, .initrd, .cmdline); nil when the image boots from its disk.
func (r *Reconciler) imageKernel(image string) *virt.KernelBoot {
	base := filepath.Join(r.cfg.ImagesDir, image)
	if _, err := os.Stat(base + ".vmlinuz"); err != nil {
		return nil
	}
	k := &virt.KernelBoot{Kernel: base + ".vmlinuz", Cmdline: "root=/dev/vda rw console=ttyS0"}
	if _, err := os.Stat(base + ".initrd"); err == nil {
		k.Initrd = base + ".initrd"
	}
	if b, err := os.ReadFile(base + ".cmdline"); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		k.Cmdline = strings.TrimSpace(string(b))
	}
	return k
}
