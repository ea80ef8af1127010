// Package reconcile is hostd's control loop. Level-triggered: each pass reads what the
// apiserver wants on this host and what libvirt runs, and closes the difference (define, start,
// stop, reboot, undefine; disks, VFs, seeds), then reports each instance's observed state.
// hostd keeps no state of its own beyond libvirt's domains and the files under its data dir,
// all re-read every pass, so a hostd killed anywhere converges when it comes back.
package reconcile

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"gpucloud/api"
	"gpucloud/hostd/controlplane"
	"gpucloud/hostd/images"
	"gpucloud/hostd/sriov"
	"gpucloud/hostd/tenantfw"
	"gpucloud/hostd/transfer"
	"gpucloud/hostd/virt"
)

// Config is what a Reconciler works with.
type Config struct {
	ControlPlane controlplane.Client
	Hypervisor   *virt.Hypervisor
	VFs          *sriov.Pool // nil on a host without InfiniBand
	DataDir      string      // instances/<id>/{disk.qcow2,seed.iso,console.log,token.json}
	ImagesDir    string      // base images, <image>.qcow2
	GuestLibrary string      // the guest libcuda.so.1 put into every seed; "" for none
	Network      virt.Network
	// Firewall keeps tenants apart with hostd's nftables rules (tenant networking); required
	// there on a real hypervisor. FirewallInfra: the platform's networks (tenantfw.DefaultInfra).
	Firewall      *tenantfw.Firewall
	FirewallInfra []netip.Prefix
	// QEMUUID and QEMUGID are the user and group QEMU runs as: every domain is defined with
	// them (a static DAC label, whatever qemu.conf says), and with user-mode networking (and
	// Firewall) that user's sockets, which carry the guests' connections, reach only data ports
	// and the internet. 0: qemu.conf's user, unfiltered.
	QEMUUID, QEMUGID uint32
	Ports            PortRange        // host ports forwarded to VMs (SSH first); zero: none
	PublicHost       string           // how tenants reach this host's forwarded ports (shown in the API)
	Kernel           *virt.KernelBoot // direct kernel boot for every VM (tests, appliance images)
	Ivshmem          *IvshmemConfig   // ivshmem channels to a gpuserverd on this host; nil: none
	VolumePool       string           // libvirt storage pool of tenants' volumes ("": no volumes here)
	VolumeDir        string           // its directory (DataDir/volumes when empty)
	Hostname         string
	Version          string
	// ConsoleURL is where the apiserver reaches this host's console server (hostd/console);
	// "" when it runs none.
	ConsoleURL string
	// Exports are the disks this host offers to a drain's targets (served by hostd's transfer
	// listener at TransferEndpoint); nil: this host cannot be a move's source.
	Exports          *transfer.Exports
	TransferEndpoint string
	Transfer         transfer.Client // how this host pulls a moving VM's disks from its source

	TokenRenewBefore time.Duration // renew a session token this long before it expires (10m)
	StopGrace        time.Duration // ACPI shutdown before a hard stop (60s)
	UsageWindow      time.Duration // VM time is billed in windows of this length (1m)
	Log              *slog.Logger
	Now              func() time.Time
}

// Reconciler closes the gap between desired and observed instances.
type Reconciler struct {
	cfg Config
	log *slog.Logger

	images *images.Cache // fetched, verified base images, in ImagesDir

	mu            sync.Mutex
	hostID        string
	consoleKey    ed25519.PublicKey // signs console grants (from the heartbeat's answer)
	period        time.Duration
	stopRequested map[string]time.Time
	usage         usageQueue
	lastSuccess   time.Time

	// crashAt, when it returns true for a named point, makes the pass stop dead there, as a
	// hostd killed at that moment would: tests use it to prove restarts converge.
	crashAt func(point string) bool
	// leasedAddress is the hypervisor's DHCP-lease lookup; tests of the test driver, which
	// has no leases, replace it.
	leasedAddress func(domain string, subnet netip.Prefix) (netip.Addr, error)
}

// New checks the configuration and returns a Reconciler.
func New(cfg Config) (*Reconciler, error) {
	if cfg.ControlPlane == nil || cfg.Hypervisor == nil {
		return nil, errors.New("reconcile: control plane and hypervisor are required")
	}
	if cfg.DataDir == "" || cfg.ImagesDir == "" {
		return nil, errors.New("reconcile: data and images dirs are required")
	}
	if cfg.Network.Kind == "tenant" && cfg.Firewall == nil && cfg.Hypervisor.DomainType() != "test" {
		return nil, errors.New("reconcile: tenant networking needs the tenant firewall (nft)")
	}
	if cfg.QEMUUID != 0 && cfg.QEMUGID == 0 {
		return nil, errors.New("reconcile: QEMU's user needs its group (not root's)")
	}
	if cfg.Ivshmem != nil {
		if err := cfg.Ivshmem.validate(); err != nil {
			return nil, fmt.Errorf("reconcile: %w", err)
		}
	}
	if err := os.MkdirAll(filepath.Join(cfg.DataDir, "instances"), 0o755); err != nil {
		return nil, fmt.Errorf("reconcile: data dir: %w", err)
	}
	if cfg.VolumePool != "" {
		if cfg.VolumeDir == "" {
			cfg.VolumeDir = filepath.Join(cfg.DataDir, "volumes")
		}
		if err := cfg.Hypervisor.EnsurePool(cfg.VolumePool, cfg.VolumeDir); err != nil {
			return nil, fmt.Errorf("reconcile: %w", err)
		}
	}
	if cfg.Hostname == "" {
		cfg.Hostname, _ = os.Hostname()
	}
	if cfg.TokenRenewBefore == 0 {
		cfg.TokenRenewBefore = 10 * time.Minute
	}
	if cfg.StopGrace == 0 {
		cfg.StopGrace = time.Minute
	}
	if cfg.UsageWindow == 0 {
		cfg.UsageWindow = time.Minute
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	sp, spooled, err := openSpool(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("reconcile: %w", err)
	}
	r := &Reconciler{cfg: cfg, log: cfg.Log, stopRequested: map[string]time.Time{}, period: 10 * time.Second,
		images: &images.Cache{Dir: cfg.ImagesDir}}
	r.usage.spool = sp
	r.usage.pending = spooled
	r.usage.sent = map[string]time.Time{}
	for _, rec := range spooled {
		r.usage.sent[rec.ID] = rec.Start
	}
	if len(spooled) > 0 {
		r.log.Info("usage records from an earlier run to send", "records", len(spooled))
	}
	return r, nil
}

// Heartbeat registers the host (first time) and reports its capacity.
func (r *Reconciler) Heartbeat(ctx context.Context) error {
	vcpus, mem, err := r.cfg.Hypervisor.NodeInfo()
	if err != nil {
		return err
	}
	var st syscall.Statfs_t
	disk := 0
	if syscall.Statfs(r.cfg.DataDir, &st) == nil {
		disk = int(st.Bavail * uint64(st.Bsize) >> 30)
	}
	vfs := 0
	if r.cfg.VFs != nil {
		vfs = r.cfg.VFs.Capacity()
	}
	ack, err := r.cfg.ControlPlane.Heartbeat(ctx, api.HostReport{
		Hostname: r.cfg.Hostname, Hypervisor: r.cfg.Hypervisor.URI(), Version: r.cfg.Version,
		Capacity:         api.HostCapacity{VCPUs: vcpus, MemoryMiB: mem, DiskGiB: disk, InfiniBandVFs: vfs},
		ConsoleURL:       r.cfg.ConsoleURL,
		TransferEndpoint: r.cfg.TransferEndpoint,
	})
	if err != nil {
		return fmt.Errorf("reconcile: heartbeat: %w", err)
	}
	r.mu.Lock()
	r.hostID = ack.HostID
	if key, err := base64.StdEncoding.DecodeString(ack.ConsoleKey); err == nil && len(key) == ed25519.PublicKeySize {
		r.consoleKey = key
	}
	if ack.HeartbeatPeriod > 0 {
		r.period = ack.HeartbeatPeriod
	}
	r.mu.Unlock()
	return nil
}

// HostID is the id the apiserver gave this host ("" before the first heartbeat).
func (r *Reconciler) HostID() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hostID
}

// ConsoleAuth is what verifies console grants: this host's id and the apiserver's key (both
// empty before the first heartbeat).
func (r *Reconciler) ConsoleAuth() (hostID string, key ed25519.PublicKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hostID, r.consoleKey
}

// crash reports errKilled when a test asked to die at this point.
func (r *Reconciler) crash(point string) error {
	if r.crashAt != nil && r.crashAt(point) {
		return fmt.Errorf("at %s: %w", point, errKilled)
	}
	return nil
}

// Once runs one reconcile pass. Errors of single instances are reported to the apiserver and
// joined into the result; the pass goes on with the other instances.
func (r *Reconciler) Once(ctx context.Context) error {
	if r.HostID() == "" {
		if err := r.Heartbeat(ctx); err != nil {
			return err
		}
	}
	all, err := r.cfg.ControlPlane.DesiredInstances(ctx)
	if err != nil {
		return fmt.Errorf("reconcile: desired instances: %w", err)
	}
	desired := all.Instances
	if err := r.reconcileFirewall(ctx, desired); err != nil {
		return err // fail closed: no VM starts on a network its rules do not cover
	}
	volumes, err := r.ensureVolumes(all.Volumes)
	if err != nil {
		return err
	}
	doms, err := r.cfg.Hypervisor.List()
	if err != nil {
		return err
	}
	actual := map[string]virt.Domain{}
	for _, d := range doms {
		actual[d.Meta.InstanceID] = d
	}
	var errs []error
	wanted := map[string]bool{}
	offered := map[string]bool{} // moves this host is the source of
	for _, d := range desired {
		wanted[d.ID] = true
		var dom *virt.Domain
		if a, ok := actual[d.ID]; ok {
			dom = &a
		}
		if d.Move != nil && d.Move.Role == api.MoveIn {
			// The target reports on the move, not the instance: it is not placed here until done.
			if err := r.moveIn(ctx, d, dom, volumes, all.Volumes); err != nil {
				errs = append(errs, fmt.Errorf("move in %s: %w", d.ID, err))
				if errors.Is(err, errKilled) {
					return errors.Join(errs...)
				}
			}
			continue
		}
		var obs api.InstanceObserved
		var err error
		if d.Move != nil && d.Move.Role == api.MoveOut {
			offered[d.Move.ID] = true
			obs, err = r.moveOut(ctx, d, dom, volumes)
		} else {
			obs, err = r.instance(ctx, d, dom, volumes)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("instance %s: %w", d.ID, err))
			if errors.Is(err, errKilled) {
				return errors.Join(errs...) // a dead hostd reports nothing
			}
		}
		if err := r.cfg.ControlPlane.ReportInstance(ctx, d.ID, obs); err != nil {
			errs = append(errs, fmt.Errorf("report %s: %w", d.ID, err))
		}
	}
	if r.cfg.Exports != nil {
		r.cfg.Exports.Retain(offered) // a move finished or failed: its disks are no longer offered
	}
	// Domains of ours the apiserver no longer places here are removed, with all they hold.
	for id := range actual {
		if !wanted[id] {
			r.log.Warn("removing domain no longer placed on this host", "instance", id)
			if err := r.teardown(id); err != nil {
				errs = append(errs, err)
				if errors.Is(err, errKilled) {
					return errors.Join(errs...)
				}
			}
		}
	}
	if len(errs) == 0 { // every unwanted domain is gone: no VM is left on an idle network
		if err := r.removeIdleTenantNetworks(desired); err != nil {
			errs = append(errs, err)
		}
	}
	if err := r.collectGarbage(wanted, actual); err != nil {
		errs = append(errs, err)
	}
	if err := r.deleteVolumes(all.Volumes); err != nil {
		errs = append(errs, err)
	}
	if err := r.flushUsage(ctx); err != nil {
		errs = append(errs, err)
	}
	r.mu.Lock()
	r.lastSuccess = r.cfg.Now() // the pass completed; per-instance failures are reported, not fatal
	r.mu.Unlock()
	return errors.Join(errs...)
}

// LastPass is when the last complete pass ended (zero before the first).
func (r *Reconciler) LastPass() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastSuccess
}

// Run heartbeats and reconciles until ctx ends. kick, if not nil, asks for an early pass (libvirt
// lifecycle events).
func (r *Reconciler) Run(ctx context.Context, interval time.Duration, kick <-chan struct{}) error {
	hb := time.NewTimer(0)
	defer hb.Stop()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-hb.C:
			if err := r.Heartbeat(ctx); err != nil {
				r.log.Error("heartbeat failed", "err", err)
			}
			r.mu.Lock()
			hb.Reset(r.period)
			r.mu.Unlock()
			continue
		case <-tick.C:
		case <-kick:
		}
		passes.Inc()
		if err := r.Once(ctx); err != nil {
			passErrors.Inc()
			r.log.Error("reconcile pass", "err", err)
		}
	}
}
