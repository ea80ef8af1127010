package reconcile

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"gpucloud/api"
	"gpucloud/hostd/virt"
)

// A host drain's move (docs/hostd.md, "A drain that moves VMs"), restart mode. The source stops
// the VM, offers its disks (root overlay and attached volumes) on its transfer endpoint and says
// ready; the target pulls them, points the overlay at its own copy of the base image, puts the
// volumes into its pool, then provisions and starts the VM as it would any other (seed, tenant
// network and firewall rules, port forwards) and says done with what it observed. Until done the
// instance is the source's; a failure on either side leaves it there, and the source starts it
// again.

var moveSecretPattern = regexp.MustCompile(`^[0-9a-f]{64}$`)

// checkMove validates a move as the apiserver hands it.
func checkMove(m *api.HostMove) error {
	var errs []error
	if err := virt.ValidID(m.ID); err != nil {
		errs = append(errs, fmt.Errorf("move.id: %w", err))
	}
	if m.Role != api.MoveOut && m.Role != api.MoveIn {
		errs = append(errs, fmt.Errorf("move.role %q: want out or in", m.Role))
	}
	if m.Phase != api.MovePending && m.Phase != api.MoveCopying {
		errs = append(errs, fmt.Errorf("move.phase %q: want pending or copying", m.Phase))
	}
	if m.Mode != "restart" {
		errs = append(errs, fmt.Errorf("move.mode %q: this hostd moves VMs by restarting them", m.Mode))
	}
	if !moveSecretPattern.MatchString(m.Secret) {
		errs = append(errs, errors.New("move.secret: want 64 hex digits"))
	}
	if m.Role == api.MoveIn && (m.Source == "" || strings.ContainsAny(m.Source, "/?#@ ") || !strings.Contains(m.Source, ":")) {
		errs = append(errs, fmt.Errorf("move.source %q: want host:port", m.Source))
	}
	return errors.Join(errs...)
}

// reportMove tells the apiserver about a move; a failure to say so is the pass's error.
func (r *Reconciler) reportMove(ctx context.Context, m *api.HostMove, rep api.HostMoveReport) error {
	if err := r.cfg.ControlPlane.ReportMove(ctx, m.ID, rep); err != nil {
		return fmt.Errorf("report move %s %s: %w", m.ID, rep.State, err)
	}
	return nil
}

// failMove reports a move failed with err's text and returns err.
func (r *Reconciler) failMove(ctx context.Context, m *api.HostMove, err error) error {
	r.log.Warn("move failed", "move", m.ID, "role", m.Role, "err", err)
	actions.WithLabelValues("move-failed").Inc()
	if rerr := r.reportMove(ctx, m, api.HostMoveReport{State: api.HostMoveFailed, Reason: err.Error()}); rerr != nil {
		return errors.Join(err, rerr)
	}
	return err
}

// moveFiles names the files a move carries: the root disk and each attached volume.
func (r *Reconciler) moveFiles(d api.DesiredInstance, volumes map[string]string) (map[string]string, error) {
	files := map[string]string{"disk": r.paths(d.ID).disk}
	for _, a := range d.Spec.Volumes {
		p, ok := volumes[a.ID]
		if !ok {
			return nil, fmt.Errorf("volume %s attached but not on this host", a.ID)
		}
		files["volume-"+a.ID] = p
	}
	return files, nil
}

// moveOut is the source's part: the VM is stopped (ACPI, forced after StopGrace) whatever its
// desired state, and once it is off its disks are offered and the apiserver hears ready.
func (r *Reconciler) moveOut(ctx context.Context, d api.DesiredInstance, dom *virt.Domain, volumes map[string]string) (api.InstanceObserved, error) {
	m := d.Move
	if err := errors.Join(r.validate(d), checkMove(m)); err != nil {
		return api.InstanceObserved{}, err // the apiserver's answer is wrong: change nothing
	}
	if dom == nil {
		err := fmt.Errorf("the VM has no domain on its source host")
		return failed(err, 0), r.failMove(ctx, m, err)
	}
	if r.cfg.Exports == nil {
		err := errors.New("the source host offers no transfer endpoint (hostd --transfer-listen)")
		return r.observe(d, dom, observedOf(dom), nil), r.failMove(ctx, m, err)
	}
	files, err := r.moveFiles(d, volumes)
	if err != nil {
		return r.observe(d, dom, observedOf(dom), nil), r.failMove(ctx, m, err)
	}
	if dom.State != virt.Stopped {
		stopped, err := r.stop(dom.Name)
		if err != nil {
			return r.observe(d, dom, observedOf(dom), err), err
		}
		if !stopped {
			return r.observe(d, dom, observedOf(dom), nil), nil // the guest is shutting down: next pass
		}
		actions.WithLabelValues("move-stop").Inc()
		dom.State = virt.Stopped
	}
	r.cfg.Exports.Offer(m.ID, m.Secret, files)
	if m.Phase == api.MovePending {
		var total int64
		for _, p := range files {
			if st, err := os.Stat(p); err == nil {
				total += st.Size()
			}
		}
		if err := r.reportMove(ctx, m, api.HostMoveReport{State: api.HostMoveReady, BytesTotal: total}); err != nil {
			return r.observe(d, dom, api.ObservedStopped, nil), err
		}
	}
	return r.observe(d, dom, api.ObservedStopped, nil), nil
}

func observedOf(dom *virt.Domain) string {
	switch dom.State {
	case virt.Running:
		return api.ObservedRunning
	case virt.Stopped:
		return api.ObservedStopped
	}
	return api.ObservedProvisioning
}

// moveIn is the target's part: pull the disks once (a marker names the move they came with),
// then converge the instance as any other, and report done once it is as wanted.
func (r *Reconciler) moveIn(ctx context.Context, d api.DesiredInstance, dom *virt.Domain, volumes map[string]string, sizes []api.DesiredVolume) error {
	m := d.Move
	if err := errors.Join(r.validate(d), checkMove(m)); err != nil {
		return err
	}
	marker := filepath.Join(r.paths(d.ID).dir, "moved-in")
	if b, err := os.ReadFile(marker); err != nil || string(b) != m.ID {
		if dom != nil {
			return r.failMove(ctx, m, errors.New("a domain of this instance already exists on the target host"))
		}
		if err := r.importDisks(ctx, d, volumes, sizes); err != nil {
			if errors.Is(err, errKilled) || ctx.Err() != nil {
				return err
			}
			if terr := r.teardown(d.ID); terr != nil {
				r.log.Error("cleaning up after a failed move in", "instance", d.ID, "err", terr)
			}
			return r.failMove(ctx, m, err)
		}
		if err := os.WriteFile(marker, []byte(m.ID), 0o600); err != nil {
			return r.failMove(ctx, m, fmt.Errorf("mark the disks imported: %w", err))
		}
		if err := r.crash("moved-in"); err != nil {
			return err
		}
	}
	if dom == nil && m.PrivateAddress != "" && r.cfg.Network.Kind == "tenant" {
		// Defined first, not started: its first DHCP request must find its address reserved.
		held := d
		held.DesiredState = api.DesiredStopped
		if _, err := r.instance(ctx, held, nil, volumes); err != nil {
			if errors.Is(err, errKilled) {
				return err
			}
			return r.failMove(ctx, m, err)
		}
		r.keepAddress(d, m.PrivateAddress)
		doms, err := r.cfg.Hypervisor.List()
		if err != nil {
			return err
		}
		for i := range doms {
			if doms[i].Meta.InstanceID == d.ID {
				dom = &doms[i]
			}
		}
	}
	obs, err := r.instance(ctx, d, dom, volumes)
	if err != nil {
		if errors.Is(err, errKilled) {
			return err
		}
		return r.failMove(ctx, m, err)
	}
	want := api.ObservedStopped
	if d.DesiredState == api.DesiredRunning {
		want = api.ObservedRunning
	}
	if obs.State != want {
		return nil // still settling: next pass
	}
	actions.WithLabelValues("move-in").Inc()
	return r.reportMove(ctx, m, api.HostMoveReport{State: api.HostMoveDone, Observed: &obs})
}

// keepAddress reserves the VM's address from the source on its tenant network here, for its
// domain's MAC. Best effort: an address taken here (another VM of the tenant holds it) or a
// network that refuses leaves the VM a fresh lease, which its instance then shows.
func (r *Reconciler) keepAddress(d api.DesiredInstance, address string) {
	ip, err := netip.ParseAddr(address)
	n, nerr := virt.TenantNetwork(d.PartitionKey)
	mac, merr := r.cfg.Hypervisor.TenantMAC(virt.DomainName(d.ID))
	if err = errors.Join(err, nerr, merr); err == nil && mac == "" {
		err = errors.New("the domain has no NIC on its tenant network")
	}
	if err == nil {
		err = r.cfg.Hypervisor.ReserveAddress(n, mac, ip)
	}
	if err != nil {
		r.log.Warn("a moved VM takes a fresh address", "instance", d.ID, "address", address, "err", err)
		return
	}
	actions.WithLabelValues("keep-address").Inc()
}

// progressEvery is how often a copy's progress goes to the apiserver.
const progressEvery = time.Second

// importDisks pulls a move's files from the source into this host's places for them, and vets
// each (virt.CheckImported: a compromised source must not hand this host a disk that reads its
// other files, or grows past what the VM holds).
func (r *Reconciler) importDisks(ctx context.Context, d api.DesiredInstance, volumes map[string]string, sizes []api.DesiredVolume) error {
	m := d.Move
	man, err := r.cfg.Transfer.Manifest(ctx, m.Source, m.ID, m.Secret)
	if err != nil {
		return err
	}
	dests := map[string]string{"disk": r.paths(d.ID).disk}
	limits := map[string]int64{"disk": int64(d.Spec.DiskGiB) << 30}
	for _, a := range d.Spec.Volumes {
		p, ok := volumes[a.ID]
		if !ok {
			return fmt.Errorf("volume %s moves with the VM but this host's pool has no place for it", a.ID)
		}
		dests["volume-"+a.ID] = p
		for _, v := range sizes {
			if v.ID == a.ID {
				limits["volume-"+a.ID] = int64(v.SizeGiB) << 30
			}
		}
	}
	if len(man.Files) != len(dests) {
		return fmt.Errorf("the source offers %d file(s), the VM has %d disk(s)", len(man.Files), len(dests))
	}
	for _, f := range man.Files {
		if _, ok := dests[f.Name]; !ok {
			return fmt.Errorf("the source offers %q, which is none of the VM's disks", f.Name)
		}
	}
	total, done := man.Total(), int64(0)
	last := time.Time{}
	progress := func(n int64) {
		if now := r.cfg.Now(); now.Sub(last) >= progressEvery {
			last = now
			if err := r.reportMove(ctx, m, api.HostMoveReport{State: api.HostMoveCopying, BytesCopied: done + n, BytesTotal: total}); err != nil {
				r.log.Warn("reporting a move's progress", "move", m.ID, "err", err)
			}
		}
	}
	for _, f := range man.Files {
		if err := r.cfg.Transfer.Fetch(ctx, m.Source, m.ID, m.Secret, f, dests[f.Name], progress); err != nil {
			return err
		}
		if err := virt.CheckImported(ctx, dests[f.Name], limits[f.Name], f.Name == "disk"); err != nil {
			os.Remove(dests[f.Name])
			return err
		}
		done += f.Size
		if err := r.crash("fetched-" + f.Name); err != nil {
			return err
		}
	}
	base, err := r.ensureBase(ctx, d)
	if err != nil {
		return err
	}
	if err := virt.Rebase(ctx, dests["disk"], base); err != nil {
		return err
	}
	if len(d.Spec.Volumes) > 0 {
		if err := r.cfg.Hypervisor.RefreshPool(r.cfg.VolumePool); err != nil {
			return err
		}
	}
	return r.reportMove(ctx, m, api.HostMoveReport{State: api.HostMoveCopying, BytesCopied: total, BytesTotal: total})
}
