// Command hostd runs on every VM host: it keeps the host's libvirt domains, InfiniBand VFs and
// VM seeds in line with what the apiserver wants (see hostd/reconcile).
package main

// docs/configuration.md is generated from the flags.
//go:generate env GPUCLOUD_UPDATE_DOCS=1 go test -count=1 -run ^TestConfigurationDoc$ .

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"gpucloud/hostd/controlplane"
	"gpucloud/hostd/reconcile"
	"gpucloud/hostd/sriov"
	"gpucloud/hostd/tenantfw"
	"gpucloud/hostd/transfer"
	"gpucloud/hostd/virt"
	"gpucloud/internal/httplimits"
	"gpucloud/internal/tlsconf"
)

var version = "dev"

type options struct {
	apiserver, credential, credentialFile string
	libvirtURI, domainType                string
	sysfsRoot, partitionDir               string
	enableVFs                             bool
	dataDir, imagesDir, guestLibrary      string
	network, listen, logLevel             string
	consoleListen, consoleURL             string
	consoleCert, consoleKey               string
	consoleIdle                           time.Duration
	caFile                                string
	interval                              time.Duration
	ivshmemServer, ivshmemDir             string
	ivshmemMiB, ivshmemGID                int
	forwardPorts, forwardBind, publicHost string
	volumePool, volumeDir                 string
	transferListen, transferAdvertise     string
	ports                                 reconcile.PortRange
	tenantInfra, qemuUser                 string
	qemuUID, qemuGID                      uint32
	infraNets                             []netip.Prefix
}

// env returns the environment variable's value, or def.
func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

// newFlagSet defines hostd's flags into o; defaults read the environment now (and
// docs/configuration.md is generated from them).
func newFlagSet(o *options) *flag.FlagSet {
	fs := flag.NewFlagSet("hostd", flag.ContinueOnError)
	fs.StringVar(&o.apiserver, "apiserver", env("HOSTD_APISERVER", "http://127.0.0.1:8080"), "apiserver base URL ($HOSTD_APISERVER)")
	fs.StringVar(&o.credential, "credential", env("HOSTD_CREDENTIAL", ""), "host credential from POST /v1/hosts ($HOSTD_CREDENTIAL)")
	fs.StringVar(&o.credentialFile, "credential-file", env("HOSTD_CREDENTIAL_FILE", ""), "file holding the host credential ($HOSTD_CREDENTIAL_FILE)")
	fs.StringVar(&o.libvirtURI, "libvirt-uri", env("HOSTD_LIBVIRT_URI", "test:///default"), "libvirt URI: qemu:///system on real hosts ($HOSTD_LIBVIRT_URI)")
	fs.StringVar(&o.domainType, "domain-type", env("HOSTD_DOMAIN_TYPE", ""), "libvirt domain type kvm|qemu|test; empty picks ($HOSTD_DOMAIN_TYPE)")
	fs.StringVar(&o.sysfsRoot, "sysfs-root", env("HOSTD_SYSFS_ROOT", "/sys"), "sysfs root for InfiniBand discovery ($HOSTD_SYSFS_ROOT)")
	fs.StringVar(&o.partitionDir, "partition-dir", env("HOSTD_PARTITION_DIR", ""), "where VF partition memberships are written for the subnet manager ($HOSTD_PARTITION_DIR)")
	fs.BoolVar(&o.enableVFs, "enable-vfs", env("HOSTD_ENABLE_VFS", "true") == "true", "enable all SR-IOV VFs of IB devices that have none ($HOSTD_ENABLE_VFS)")
	fs.StringVar(&o.dataDir, "data-dir", env("HOSTD_DATA_DIR", "/var/lib/gpucloud/hostd"), "VM disks, seeds, console logs, VF claims ($HOSTD_DATA_DIR)")
	fs.StringVar(&o.imagesDir, "images-dir", env("HOSTD_IMAGES_DIR", ""), "base images <name>.qcow2; default <data-dir>/images ($HOSTD_IMAGES_DIR)")
	fs.StringVar(&o.guestLibrary, "guest-library", env("HOSTD_GUEST_LIBRARY", ""), "guest libcuda.so.1 put in every seed, e.g. gpuserverd/guest/build/libcuda.so.1 ($HOSTD_GUEST_LIBRARY)")
	fs.StringVar(&o.network, "network", env("HOSTD_NETWORK", "network:default"), "VM NIC: network:<name>, bridge:<name>, user, or tenant (a filtered network per tenant that hostd makes) ($HOSTD_NETWORK)")
	fs.StringVar(&o.tenantInfra, "tenant-infra", env("HOSTD_TENANT_INFRA", ""), "with -network tenant: the platform's networks (apiserver, gpuserverd admin ports, hosts), comma-separated IPv4 CIDRs, that VMs reach nothing of but their GPU data ports; empty: every private, shared and link-local range ($HOSTD_TENANT_INFRA)")
	fs.StringVar(&o.qemuUser, "qemu-user", env("HOSTD_QEMU_USER", ""), "the user QEMU runs as (name or uid, never root, e.g. libvirt-qemu): hostd defines every domain with it (and its primary group), whatever qemu.conf says; with -network user, hostd's nftables rules let its sockets, which carry the guests' connections, reach only GPU data ports, DNS and the internet, nothing of the host's own addresses; empty: qemu.conf's user, and guests reach all of the host ($HOSTD_QEMU_USER)")
	fs.StringVar(&o.listen, "listen", env("HOSTD_LISTEN", "127.0.0.1:9102"), "address of /healthz and /metrics ($HOSTD_LISTEN)")
	fs.StringVar(&o.consoleListen, "console-listen", env("HOSTD_CONSOLE_LISTEN", ""), "address of the interactive serial console endpoint the apiserver connects to, e.g. 0.0.0.0:9103 (grants signed by the apiserver, one use each); empty: no interactive consoles ($HOSTD_CONSOLE_LISTEN)")
	fs.StringVar(&o.consoleURL, "console-url", env("HOSTD_CONSOLE_URL", ""), "how the apiserver reaches -console-listen, ws:// or wss://; default ws(s)://<listen address> ($HOSTD_CONSOLE_URL)")
	fs.StringVar(&o.consoleCert, "console-tls-cert", env("HOSTD_CONSOLE_TLS_CERT", ""), "PEM certificate of the console endpoint (wss://); empty: plain ws:// ($HOSTD_CONSOLE_TLS_CERT)")
	fs.StringVar(&o.consoleKey, "console-tls-key", env("HOSTD_CONSOLE_TLS_KEY", ""), "PEM private key of -console-tls-cert ($HOSTD_CONSOLE_TLS_KEY)")
	fs.DurationVar(&o.consoleIdle, "console-idle", 30*time.Minute, "an interactive console with no traffic either way this long is closed")
	fs.StringVar(&o.logLevel, "log-level", env("HOSTD_LOG_LEVEL", "info"), "debug|info|warn|error ($HOSTD_LOG_LEVEL)")
	fs.DurationVar(&o.interval, "interval", 10*time.Second, "time between reconcile passes")
	fs.StringVar(&o.ivshmemServer, "ivshmem-gpu-server", env("HOSTD_IVSHMEM_GPU_SERVER", ""), "id of the gpuserverd on this host: its GPU instances get an ivshmem channel file it serves (gpuserverd --ivshmem-dir); empty: none ($HOSTD_IVSHMEM_GPU_SERVER)")
	fs.StringVar(&o.ivshmemDir, "ivshmem-dir", env("HOSTD_IVSHMEM_DIR", "/dev/shm"), "where channel files go; libvirt has QEMU open them in /dev/shm ($HOSTD_IVSHMEM_DIR)")
	fs.IntVar(&o.ivshmemMiB, "ivshmem-mib", 256, "size of each channel: a power of two, 16 to 16384 (gpuserverd splits it into slots, one per process of the VM: by default one per 64 MiB, at most 4)")
	fs.IntVar(&o.ivshmemGID, "ivshmem-gid", -1, "group of the channel files, mode 0660 (the group QEMU and gpuserverd share); -1: mode 0600, owner only")
	fs.StringVar(&o.forwardPorts, "forward-ports", env("HOSTD_FORWARD_PORTS", "22000-22999"), "host TCP ports hostd forwards to VMs' SSH (and extra) ports, FIRST-LAST; empty: none ($HOSTD_FORWARD_PORTS)")
	fs.StringVar(&o.forwardBind, "forward-bind", env("HOSTD_FORWARD_BIND", "0.0.0.0"), "address the forwarded ports listen on (user networking) or are rewritten at (tenant networking; 0.0.0.0: every address but loopback) ($HOSTD_FORWARD_BIND)")
	fs.StringVar(&o.volumePool, "volume-pool", env("HOSTD_VOLUME_POOL", "gpucloud-volumes"), "libvirt storage pool (a directory pool hostd makes) of tenants' volumes; empty: no volumes on this host ($HOSTD_VOLUME_POOL)")
	fs.StringVar(&o.volumeDir, "volume-dir", env("HOSTD_VOLUME_DIR", ""), "directory of the volume pool; default <data-dir>/volumes ($HOSTD_VOLUME_DIR)")
	fs.StringVar(&o.transferListen, "transfer-listen", env("HOSTD_TRANSFER_LISTEN", ""), "address where a host drain's target pulls the disks of VMs moving off this host (each move's own secret admits its target to its files only); empty: this host's VMs cannot be moved ($HOSTD_TRANSFER_LISTEN)")
	fs.StringVar(&o.transferAdvertise, "transfer-advertise", env("HOSTD_TRANSFER_ADVERTISE", ""), "host:port other hosts reach -transfer-listen at; default its address, or -public-host with its port when it names no host ($HOSTD_TRANSFER_ADVERTISE)")
	fs.StringVar(&o.publicHost, "public-host", env("HOSTD_PUBLIC_HOST", ""), "host name or address tenants reach forwarded ports at; default the hostname ($HOSTD_PUBLIC_HOST)")
	fs.StringVar(&o.caFile, "ca-file", env("HOSTD_CA_FILE", ""), "PEM CA certificates to trust for an https apiserver instead of the system roots ($HOSTD_CA_FILE)")
	return fs
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := newFlagSet(&o)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.credentialFile != "" {
		b, err := os.ReadFile(o.credentialFile)
		if err != nil {
			return o, fmt.Errorf("-credential-file: %w", err)
		}
		o.credential = strings.TrimSpace(string(b))
	}
	if o.credential == "" {
		return o, errors.New("-credential or -credential-file is required")
	}
	if o.imagesDir == "" {
		o.imagesDir = filepath.Join(o.dataDir, "images")
	}
	if o.interval < time.Second || o.interval > time.Hour {
		return o, fmt.Errorf("-interval %v out of range 1s-1h", o.interval)
	}
	if o.guestLibrary != "" {
		if _, err := os.Stat(o.guestLibrary); err != nil {
			return o, fmt.Errorf("-guest-library: %w", err)
		}
	}
	if _, err := parseNetwork(o.network); err != nil {
		return o, err
	}
	var err error
	if o.infraNets, err = parseInfra(o.tenantInfra); err != nil {
		return o, err
	}
	if o.qemuUID, o.qemuGID, err = parseQEMUUser(o.qemuUser); err != nil {
		return o, err
	}
	if o.ports, err = parsePortRange(o.forwardPorts); err != nil {
		return o, err
	}
	if o.publicHost == "" {
		o.publicHost, _ = os.Hostname()
	}
	if err := checkConsoleFlags(o); err != nil {
		return o, err
	}
	return o, nil
}

// parsePortRange reads FIRST-LAST (1024-65535); "" is no forwarding.
func parsePortRange(s string) (reconcile.PortRange, error) {
	if s == "" {
		return reconcile.PortRange{}, nil
	}
	a, b, ok := strings.Cut(s, "-")
	first, err1 := strconv.Atoi(a)
	last, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || first < 1024 || last > 65535 || first > last {
		return reconcile.PortRange{}, fmt.Errorf("-forward-ports %q: want FIRST-LAST within 1024-65535", s)
	}
	return reconcile.PortRange{First: first, Last: last}, nil
}

// parseInfra reads -tenant-infra: comma-separated IPv4 network addresses.
func parseInfra(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil || !p.Addr().Is4() || p.Masked() != p {
			return nil, fmt.Errorf("-tenant-infra %q: want IPv4 network addresses like 10.0.0.0/8, comma-separated", f)
		}
		out = append(out, p)
	}
	return out, nil
}

// parseQEMUUser resolves -qemu-user, a name or uid, to the uid and primary group QEMU runs
// as ("" is 0, 0: qemu.conf's user, no filter); root is refused, since filtering root's sockets
// would cut the host itself off.
func parseQEMUUser(s string) (uid, gid uint32, err error) {
	if s == "" {
		return 0, 0, nil
	}
	u, err := user.Lookup(s)
	if _, numeric := strconv.ParseUint(s, 10, 32); numeric == nil {
		u, err = user.LookupId(s)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("-qemu-user %q: %w", s, err)
	}
	id, err1 := strconv.ParseUint(u.Uid, 10, 32)
	group, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil || id == 0 || group == 0 {
		return 0, 0, fmt.Errorf("-qemu-user %q: want a user and primary group other than root (QEMU's own, e.g. libvirt-qemu)", s)
	}
	return uint32(id), uint32(group), nil
}

func parseNetwork(s string) (virt.Network, error) {
	if s == "user" || s == "tenant" {
		return virt.Network{Kind: s}, nil
	}
	kind, name, ok := strings.Cut(s, ":")
	if !ok || name == "" || (kind != "network" && kind != "bridge") {
		return virt.Network{}, fmt.Errorf("-network %q: want network:<name>, bridge:<name>, user or tenant", s)
	}
	return virt.Network{Kind: kind, Name: name}, nil
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "hostd:", err)
		os.Exit(2)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		fmt.Fprintln(os.Stderr, "hostd: -log-level:", err)
		os.Exit(2)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, log); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("hostd stopped", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options, log *slog.Logger) error {
	hc, err := tlsconf.Client(o.caFile, 30*time.Second)
	if err != nil {
		return fmt.Errorf("-ca-file: %w", err)
	}
	cp, err := controlplane.NewHTTPClient(o.apiserver, o.credential, hc)
	if err != nil {
		return err
	}
	if err := virt.StartEventLoop(); err != nil {
		return err
	}
	hv, err := virt.Open(o.libvirtURI, o.domainType)
	if err != nil {
		return err
	}
	defer hv.Close()
	pool, err := sriov.NewPool(ctx, o.sysfsRoot, filepath.Join(o.dataDir, "vfs"), sriov.NetlinkFabric{PartitionDir: o.partitionDir}, o.enableVFs)
	if err != nil {
		return err
	}
	network, _ := parseNetwork(o.network)
	network.ForwardBind = o.forwardBind
	var shm *reconcile.IvshmemConfig
	if o.ivshmemServer != "" {
		shm = &reconcile.IvshmemConfig{GPUServerID: o.ivshmemServer, Dir: o.ivshmemDir, Bytes: uint64(o.ivshmemMiB) << 20, GID: o.ivshmemGID}
	}
	var fw *tenantfw.Firewall
	if (network.Kind == "tenant" && hv.DomainType() != "test") || (network.Kind == "user" && o.qemuUID != 0) {
		if _, err := exec.LookPath("nft"); err != nil {
			return fmt.Errorf("-network %s filters VMs' traffic with nftables: %w (install nftables)", network.Kind, err)
		}
		fw = &tenantfw.Firewall{Log: log}
	}
	consoleLn, consoleURL, err := listenConsole(o)
	if err != nil {
		return err
	}
	if consoleLn != nil {
		defer consoleLn.Close()
	}
	var exports *transfer.Exports
	advertise := o.transferAdvertise
	if o.transferListen != "" {
		exports = &transfer.Exports{}
		if advertise == "" {
			advertise = transferAdvertise(o.transferListen, o.publicHost)
		}
	}
	r, err := reconcile.New(reconcile.Config{
		ControlPlane: cp, Hypervisor: hv, VFs: pool, DataDir: o.dataDir, ImagesDir: o.imagesDir,
		GuestLibrary: o.guestLibrary, Network: network, Version: version, Log: log, Ivshmem: shm,
		Ports: o.ports, PublicHost: o.publicHost, VolumePool: o.volumePool, VolumeDir: o.volumeDir,
		Firewall: fw, FirewallInfra: o.infraNets, QEMUUID: o.qemuUID, QEMUGID: o.qemuGID, ConsoleURL: consoleURL,
		Exports: exports, TransferEndpoint: advertise,
	})
	if err != nil {
		return err
	}
	if exports != nil {
		stop, err := serveTransfers(o.transferListen, exports, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	log.Info("hostd starting", "libvirt", o.libvirtURI, "domain_type", hv.DomainType(), "infiniband_vfs", pool.Capacity(), "apiserver", o.apiserver)

	kick := make(chan struct{}, 1)
	if err := hv.OnLifecycle(func(string) {
		select {
		case kick <- struct{}{}:
		default:
		}
	}); err != nil {
		log.Warn("no libvirt events; reconciling on the timer only", "err", err)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(reconcile.Collectors()...)
	reg.MustRegister(newDomainCollector(hv))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		last := r.LastPass()
		if last.IsZero() || time.Since(last) > 3*o.interval+time.Minute {
			http.Error(w, fmt.Sprintf("no complete reconcile pass since %v", last.Format(time.RFC3339)), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "ok: last pass %s\n", last.Format(time.RFC3339))
	})
	srv := httplimits.Default.Server(mux)
	srv.Addr = o.listen
	go func() {
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics listener", "err", err)
		}
	}()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if consoleLn != nil {
		stopConsole := serveConsole(ctx, o, consoleLn, r, hv, log)
		defer stopConsole()
		log.Info("interactive consoles served", "url", consoleURL)
	}
	return r.Run(ctx, o.interval, kick)
}

// transferAdvertise is where other hosts reach -transfer-listen when -transfer-advertise is not
// set: the listen address, or, where it names no host (":9103", "0.0.0.0:9103"), this host's
// public name with its port.
func transferAdvertise(listen, publicHost string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip, perr := netip.ParseAddr(host); host == "" || (perr == nil && ip.IsUnspecified()) {
		return net.JoinHostPort(publicHost, port)
	}
	return listen
}

// serveTransfers serves a drain's moves' disks to their targets. No write timeout: a disk of
// many GiB takes what it takes; a stalled peer holds one connection, bounded by the header timeout.
func serveTransfers(addr string, exports *transfer.Exports, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("-transfer-listen %s: %w", addr, err)
	}
	srv := &http.Server{Handler: exports.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("transfer listener", "err", err)
		}
	}()
	log.Info("offering moving VMs' disks", "listen", ln.Addr().String())
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}, nil
}
