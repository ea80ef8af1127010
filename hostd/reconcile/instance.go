package reconcile

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"gpucloud/api"
	"gpucloud/hostd/virt"
)

// errKilled stops a pass dead where a test asked hostd to "die" (see crashAt).
var errKilled = errors.New("killed by test hook")

type paths struct{ dir, disk, seed, console, token string }

func (r *Reconciler) paths(id string) paths {
	dir := filepath.Join(r.cfg.DataDir, "instances", id)
	return paths{dir, filepath.Join(dir, "disk.qcow2"), filepath.Join(dir, "seed.iso"),
		filepath.Join(dir, "console.log"), filepath.Join(dir, "token.json")}
}

func failed(err error, gen int64) api.InstanceObserved {
	return api.InstanceObserved{State: api.ObservedFailed, Reason: err.Error(), RebootGeneration: gen}
}

// instance converges one desired instance and says what it observed.
func (r *Reconciler) instance(ctx context.Context, d api.DesiredInstance, dom *virt.Domain, volumes map[string]string) (api.InstanceObserved, error) {
	gen := int64(0)
	if dom != nil {
		gen = dom.Meta.RebootGeneration
	}
	if err := r.validate(d); err != nil {
		return failed(err, gen), err
	}
	if d.DesiredState == api.DesiredDeleted {
		if err := r.teardown(d.ID); err != nil {
			return failed(err, gen), err
		}
		return api.InstanceObserved{State: api.ObservedDeleted, RebootGeneration: gen}, nil
	}
	name := virt.DomainName(d.ID)
	if dom == nil {
		// Provisioning (overlay, seed, VF) takes a while on a real host: say so first, so the
		// API shows pending -> provisioning -> running. Best effort: the pass reports again.
		if d.DesiredState == api.DesiredRunning && d.Move == nil { // a move's target reports on the move
			if err := r.cfg.ControlPlane.ReportInstance(ctx, d.ID, api.InstanceObserved{State: api.ObservedProvisioning}); err != nil {
				r.log.Warn("reporting provisioning", "instance", d.ID, "err", err)
			}
		}
		m, err := r.provision(ctx, d)
		if err != nil {
			return failed(err, 0), err
		}
		dom = &virt.Domain{Name: name, Meta: m, State: virt.Stopped}
		if err := r.crash("defined"); err != nil {
			return failed(err, 0), err
		}
	} else if err := r.refreshSeed(ctx, d, name, true); err != nil {
		return r.observe(d, dom, api.ObservedFailed, err), err
	}

	// A volume that cannot be given to the VM is an error of this pass, not a failed VM: the
	// VM runs on, and the next pass tries again.
	volErr := r.syncVolumes(d, dom, volumes)

	switch {
	case d.DesiredState == api.DesiredRunning && dom.State == virt.Stopped:
		if err := r.cfg.Hypervisor.Start(name); err != nil {
			return r.observe(d, dom, api.ObservedFailed, err), err
		}
		actions.WithLabelValues("start").Inc()
		if err := r.crash("started"); err != nil {
			return failed(err, 0), err
		}
		// A fresh boot answers every reboot asked for so far.
		if d.RebootGeneration > dom.Meta.RebootGeneration {
			if err := r.cfg.Hypervisor.SetRebootGeneration(name, d.RebootGeneration); err != nil {
				return r.observe(d, dom, api.ObservedFailed, err), err
			}
			dom.Meta.RebootGeneration = d.RebootGeneration
		}
		dom.State = virt.Running
	case d.DesiredState == api.DesiredRunning && dom.State == virt.Running && d.RebootGeneration > dom.Meta.RebootGeneration:
		if err := r.cfg.Hypervisor.Reboot(name, d.RebootGeneration); err != nil {
			return r.observe(d, dom, api.ObservedFailed, err), err
		}
		actions.WithLabelValues("reboot").Inc()
		dom.Meta.RebootGeneration = d.RebootGeneration
	case d.DesiredState == api.DesiredStopped && dom.State != virt.Stopped:
		stopped, err := r.stop(name)
		if err != nil {
			return r.observe(d, dom, api.ObservedFailed, err), err
		}
		if stopped {
			dom.State = virt.Stopped
		}
	}
	if dom.State == virt.Running {
		r.noteRunning(d)
	}
	if d.DesiredState == api.DesiredRunning {
		r.mu.Lock()
		delete(r.stopRequested, name) // a stop overtaken by a start must not force a later one
		r.mu.Unlock()
	}
	state := api.ObservedProvisioning
	switch dom.State {
	case virt.Running:
		state = api.ObservedRunning
	case virt.Stopped:
		state = api.ObservedStopped
	}
	return r.observe(d, dom, state, nil), volErr
}

func (r *Reconciler) observe(d api.DesiredInstance, dom *virt.Domain, state string, err error) api.InstanceObserved {
	o := api.InstanceObserved{State: state, RebootGeneration: dom.Meta.RebootGeneration, VFPCIAddress: dom.Meta.VFPCIAddress,
		Forwards: r.observedForwards(dom.Meta)}
	if len(o.Forwards) > 0 {
		o.PublicHost = r.cfg.PublicHost
	}
	if err != nil {
		o.Reason = err.Error()
	}
	if r.cfg.Network.Kind == "tenant" && dom.State == virt.Running {
		o.PrivateAddress = r.privateAddress(d, dom.Name)
	}
	if tail, terr := virt.Tail(r.paths(d.ID).console, consoleTailBytes); terr == nil {
		o.ConsoleLogTail = strings.ToValidUTF8(tail, "?")
	}
	return o
}

// stop asks the guest to shut down, and forces it after StopGrace. It reports whether the
// domain is now off.
func (r *Reconciler) stop(name string) (bool, error) {
	now := r.cfg.Now()
	r.mu.Lock()
	asked, ok := r.stopRequested[name]
	if !ok {
		r.stopRequested[name] = now
	}
	r.mu.Unlock()
	if !ok {
		actions.WithLabelValues("shutdown").Inc()
		if err := r.cfg.Hypervisor.Shutdown(name); err != nil {
			r.log.Warn("ACPI shutdown refused; forcing", "domain", name, "err", err)
		} else {
			return r.isStopped(name)
		}
	} else if now.Sub(asked) < r.cfg.StopGrace {
		return false, nil
	}
	actions.WithLabelValues("destroy").Inc()
	if err := r.cfg.Hypervisor.Destroy(name); err != nil {
		return false, err
	}
	r.mu.Lock()
	delete(r.stopRequested, name)
	r.mu.Unlock()
	return true, nil
}

func (r *Reconciler) isStopped(name string) (bool, error) {
	doms, err := r.cfg.Hypervisor.List()
	if err != nil {
		return false, err
	}
	for _, d := range doms {
		if d.Name == name {
			return d.State == virt.Stopped, nil
		}
	}
	return false, fmt.Errorf("domain %s vanished while stopping", name)
}

// provision makes everything a new domain needs and defines it. Each step is idempotent, so a
// pass killed half-way is finished by the next one; a step that fails takes back what this
// instance holds, leaving the host as it was.
func (r *Reconciler) provision(ctx context.Context, d api.DesiredInstance) (m virt.Metadata, err error) {
	p := r.paths(d.ID)
	m = virt.Metadata{InstanceID: d.ID, TenantID: d.TenantID, RebootGeneration: d.RebootGeneration}
	defer func() {
		if err != nil && !errors.Is(err, errKilled) {
			if cerr := r.teardown(d.ID); cerr != nil {
				r.log.Error("rollback after failed provisioning", "instance", d.ID, "err", cerr)
			}
		}
	}()
	if r.cfg.VFs != nil && r.cfg.VFs.Capacity() > 0 {
		// First, so that a host out of VFs refuses before it writes anything.
		a, err := r.cfg.VFs.Allocate(ctx, d.ID, d.PartitionKey)
		if err != nil {
			return m, err
		}
		m.VFPCIAddress = a.VF.PCIAddress
		if err := r.crash("vf-allocated"); err != nil {
			return m, err
		}
	}
	if m.Forwards, err = r.allocateForwards(d); err != nil {
		return m, err
	}
	// Traversable for the QEMU user, not listable: seeds and tokens inside are private.
	if err := os.MkdirAll(p.dir, 0o711); err != nil {
		return m, fmt.Errorf("instance dir: %w", err)
	}
	base, err := r.ensureBase(ctx, d)
	if err != nil {
		return m, err
	}
	if err := virt.CreateOverlay(ctx, base, p.disk, d.Spec.DiskGiB); err != nil {
		return m, err
	}
	if err := r.crash("disk-created"); err != nil {
		return m, err
	}
	if err := r.refreshSeed(ctx, d, "", false); err != nil {
		return m, err
	}
	if err := r.crash("seed-written"); err != nil {
		return m, err
	}
	spec := virt.DomainSpec{
		Meta: m, Type: r.cfg.Hypervisor.DomainType(), VCPUs: d.Spec.VCPUs, MemoryMiB: d.Spec.MemoryMiB,
		Disk: p.disk, Seed: p.seed, ConsoleLog: p.console, VFPCIAddress: m.VFPCIAddress,
		Network: r.cfg.Network, Kernel: r.cfg.Kernel, Shmem: r.channelFor(d),
	}
	if r.cfg.QEMUUID != 0 {
		spec.RunAs = &virt.RunAs{UID: r.cfg.QEMUUID, GID: r.cfg.QEMUGID}
	}
	if spec.Shmem != nil { // before the domain exists: QEMU must open ours, not create its own
		if err := r.createChannel(d.ID); err != nil {
			return m, err
		}
	}
	if spec.Kernel == nil {
		spec.Kernel = r.imageKernel(d.Spec.Image)
	}
	if r.cfg.Network.Kind == "tenant" {
		if spec.Tenant, spec.GPUServer, err = r.tenantNetwork(d); err != nil {
			return m, err
		}
	}
	if err := r.cfg.Hypervisor.Define(spec); err != nil {
		return m, err
	}
	actions.WithLabelValues("define").Inc()
	return m, nil
}

// ensureBase returns the path of the instance's base image, fetched and verified first when it
// has a source.
func (r *Reconciler) ensureBase(ctx context.Context, d api.DesiredInstance) (string, error) {
	if d.Spec.ImageSource == "" {
		return r.baseImage(d.Spec.Image), nil
	}
	return r.images.Ensure(ctx, d.Spec.Image, d.Spec.ImageSource, d.Spec.ImageSHA256)
}

// teardown removes an instance's domain, VF and files; each part already gone is skipped.
func (r *Reconciler) teardown(id string) error {
	name := virt.DomainName(id)
	if r.cfg.Network.Kind == "tenant" {
		// A moved-in VM's address reservation goes with its domain (moves.go, keepAddress).
		if mac, err := r.cfg.Hypervisor.TenantMAC(name); err == nil && mac != "" {
			if err := r.cfg.Hypervisor.ReleaseAddresses(mac); err != nil {
				return err
			}
		}
	}
	if err := r.cfg.Hypervisor.Undefine(name); err != nil {
		return err
	}
	if err := r.crash("undefined"); err != nil {
		return err
	}
	if r.cfg.VFs != nil {
		if err := r.cfg.VFs.Release(id); err != nil {
			return err
		}
	}
	if err := r.crash("vf-released"); err != nil {
		return err
	}
	if err := os.RemoveAll(r.paths(id).dir); err != nil {
		return fmt.Errorf("remove files of %s: %w", id, err)
	}
	if err := r.removeChannel(id); err != nil {
		return err
	}
	r.mu.Lock()
	delete(r.stopRequested, name)
	r.mu.Unlock()
	return nil
}

// collectGarbage removes files and VF claims that belong to no wanted instance and no domain:
// what a hostd killed mid-provisioning or mid-teardown leaves behind.
func (r *Reconciler) collectGarbage(wanted map[string]bool, actual map[string]virt.Domain) error {
	var errs []error
	entries, err := os.ReadDir(filepath.Join(r.cfg.DataDir, "instances"))
	if err != nil {
		return fmt.Errorf("list instance dirs: %w", err)
	}
	for _, e := range entries {
		id := e.Name()
		if _, has := actual[id]; !wanted[id] && !has && virt.ValidID(id) == nil {
			r.log.Info("removing leftover files", "instance", id)
			errs = append(errs, os.RemoveAll(filepath.Join(r.cfg.DataDir, "instances", id)))
		}
	}
	for _, id := range r.leftoverChannels(func(id string) bool { _, has := actual[id]; return wanted[id] || has }) {
		r.log.Info("removing leftover ivshmem channel", "instance", id)
		errs = append(errs, r.removeChannel(id))
	}
	if r.cfg.VFs != nil {
		claims, err := r.cfg.VFs.Claims()
		if err != nil {
			return errors.Join(append(errs, err)...)
		}
		for id, a := range claims {
			if _, has := actual[id]; !wanted[id] && !has {
				r.log.Info("releasing leftover VF", "instance", id, "vf", a.VF.PCIAddress)
				errs = append(errs, r.cfg.VFs.Release(id))
			}
		}
	}
	return errors.Join(errs...)
}
