package reconcile

import (
	"errors"
	"fmt"

	"gpucloud/api"
	"gpucloud/hostd/virt"
)

// ensureVolumes makes every volume the apiserver keeps on this host exist in the pool, and
// returns their paths by id. A volume is created empty the first time and kept after.
func (r *Reconciler) ensureVolumes(want []api.DesiredVolume) (map[string]string, error) {
	paths := map[string]string{}
	if len(want) == 0 {
		return paths, nil
	}
	if r.cfg.VolumePool == "" {
		return paths, errors.New("reconcile: volumes placed on a host without a volume pool")
	}
	var errs []error
	for _, v := range want {
		p, err := r.cfg.Hypervisor.EnsureVolume(r.cfg.VolumePool, v.ID, v.SizeGiB)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		paths[v.ID] = p
	}
	return paths, errors.Join(errs...)
}

// deleteVolumes deletes the pool's volumes the apiserver no longer keeps (deleted by their
// tenant: never attached, since a deleted volume was detached first). An answer without a
// volumes list (an older apiserver) deletes nothing.
func (r *Reconciler) deleteVolumes(want []api.DesiredVolume) error {
	if r.cfg.VolumePool == "" || want == nil {
		return nil
	}
	keep := map[string]bool{}
	for _, v := range want {
		keep[v.ID] = true
	}
	have, err := r.cfg.Hypervisor.Volumes(r.cfg.VolumePool)
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range have {
		if !keep[id] {
			r.log.Info("deleting volume", "volume", id)
			actions.WithLabelValues("delete-volume").Inc()
			errs = append(errs, r.cfg.Hypervisor.DeleteVolume(r.cfg.VolumePool, id))
		}
	}
	return errors.Join(errs...)
}

// syncVolumes gives a domain exactly the volume disks the instance has attached: detaching
// the others first, then attaching, hotplugged where the domain runs (else at its next start).
func (r *Reconciler) syncVolumes(d api.DesiredInstance, dom *virt.Domain, paths map[string]string) error {
	have, err := r.cfg.Hypervisor.VolumeDisks(dom.Name)
	if err != nil {
		return err
	}
	want := map[string]virt.VolumeDisk{}
	for _, a := range d.Spec.Volumes {
		p, ok := paths[a.ID]
		if !ok {
			return fmt.Errorf("volume %s attached but not on this host", a.ID)
		}
		want[a.Device] = virt.VolumeDisk{ID: a.ID, Path: p, Device: a.Device}
	}
	live := dom.State == virt.Running
	var errs []error
	for _, h := range have {
		if w, ok := want[h.Device]; ok && w.Path == h.Path {
			delete(want, h.Device)
			continue
		}
		actions.WithLabelValues("detach-volume").Inc()
		if _, err := r.cfg.Hypervisor.DetachVolume(dom.Name, h, live); err != nil {
			errs = append(errs, err)
		}
	}
	for _, w := range want {
		actions.WithLabelValues("attach-volume").Inc()
		plugged, err := r.cfg.Hypervisor.AttachVolume(dom.Name, w, live)
		if err != nil {
			errs = append(errs, err)
		} else if live && !plugged {
			r.log.Warn("volume attached for the next start: this hypervisor cannot hotplug", "instance", d.ID, "volume", w.ID)
		}
	}
	return errors.Join(errs...)
}
