// Command gpuserverd serves remote CUDA sessions on this machine's GPUs.
//
//	gpuserverd --id gs1 --public-key <base64> [--listen :7070] [--listen-unix /run/gpuserverd.sock] [--ivshmem-dir /dev/shm] [--admin :7071] [--backend auto]
//	gpuserverd --apiserver URL --credential gcg_... --advertise host:port [...]
//	  (joins the control plane: id and token key come from the apiserver's ack; usage is shipped)
//	gpuserverd worker     (started by gpuserverd itself, one per session)
package main

// docs/configuration.md is generated from the flags.
//go:generate env GPUCLOUD_UPDATE_DOCS=1 go test -count=1 -run ^TestConfigurationDoc$ .

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"gpucloud/gpuserverd/ivshmem"
	"gpucloud/gpuserverd/server"
	"gpucloud/gpuserverd/wire"
	"gpucloud/gpuserverd/worker"
	"gpucloud/internal/tlsconf"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if len(os.Args) > 1 && os.Args[1] == "worker" {
		err = worker.Main(ctx, log.With("role", "worker"))
	} else if len(os.Args) > 1 && os.Args[1] == "sessions" {
		err = sessionsCmd(ctx, os.Args[2:], os.Stdout)
	} else {
		err = run(ctx, os.Args[1:], log)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpuserverd:", err)
		os.Exit(1)
	}
}

// settings are gpuserverd's flags.
type settings struct {
	config, id, listen, listenUnix, ivshmemDir, admin, adminTokenFile, pubKey, kind, dataDir, apiURL, cred, advert, caFile string
	usageEvery, hbMax, checkpoint, ivshmemTimeout, adoptTimeout                                                            time.Duration
	shmSessionMiB, shmTotalMiB                                                                                             uint64
	keepSessions                                                                                                           bool
	ivshmemSlots, maxSessions, maxPerInstance, maxPending, maxPendingPerSource                                             int
}

// env returns the environment variable's value, or def.
func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

// newFlagSet defines gpuserverd's flags into s. Precedence: command line, then --config, then
// the environment (the defaults read it now), then the built-in default.
func newFlagSet(s *settings) *flag.FlagSet {
	fs := flag.NewFlagSet("gpuserverd", flag.ContinueOnError)
	fs.StringVar(&s.config, "config", env("GPUSERVERD_CONFIG", ""), "file of flag=value lines; flags on the command line win ($GPUSERVERD_CONFIG)")
	fs.StringVar(&s.id, "id", env("GPUSERVERD_ID", ""), "this GPU server's id (the audience session tokens must name); learnt from --apiserver when unset ($GPUSERVERD_ID)")
	fs.StringVar(&s.listen, "listen", env("GPUSERVERD_LISTEN", ":7070"), "address guest libraries connect to ($GPUSERVERD_LISTEN)")
	fs.StringVar(&s.listenUnix, "listen-unix", env("GPUSERVERD_LISTEN_UNIX", ""), "Unix socket path for guests on this host, which may then use shared memory (optional) ($GPUSERVERD_LISTEN_UNIX)")
	fs.StringVar(&s.ivshmemDir, "ivshmem-dir", env("GPUSERVERD_IVSHMEM_DIR", ""), "directory of VMs' ivshmem channel files (gpucloud-<instance>, created by hostd; libvirt's is /dev/shm) to serve (optional) ($GPUSERVERD_IVSHMEM_DIR)")
	fs.IntVar(&s.ivshmemSlots, "ivshmem-slots", 0, "sessions at once per VM channel: the channel is split into this many slots (0: one per 64 MiB, at most 4; lowered to a power of two leaving each slot 16 MiB or more)")
	fs.DurationVar(&s.ivshmemTimeout, "ivshmem-peer-timeout", 0, "how long a VM guest's heartbeat may stand still before its session ends (0: 5s)")
	fs.StringVar(&s.admin, "admin", env("GPUSERVERD_ADMIN", "127.0.0.1:7071"), "HTTP address for /usage, /metrics and /healthz; keep it off any address VMs can reach ($GPUSERVERD_ADMIN)")
	fs.StringVar(&s.adminTokenFile, "admin-token-file", env("GPUSERVERD_ADMIN_TOKEN_FILE", ""), "file holding the bearer token /usage and /metrics want; unset: a random token kept in <data-dir>/admin-token ($GPUSERVERD_ADMIN_TOKEN_FILE)")
	fs.StringVar(&s.pubKey, "public-key", env("GPUSERVERD_PUBLIC_KEY", ""), "the apiserver's Ed25519 session-token public key, base64; learnt from --apiserver when unset ($GPUSERVERD_PUBLIC_KEY)")
	fs.StringVar(&s.kind, "backend", env("GPUSERVERD_BACKEND", "auto"), "auto, cuda or simulated ($GPUSERVERD_BACKEND)")
	fs.StringVar(&s.dataDir, "data-dir", env("GPUSERVERD_DATA_DIR", "/var/lib/gpuserverd"), "where usage records are kept ($GPUSERVERD_DATA_DIR)")
	fs.StringVar(&s.apiURL, "apiserver", env("GPUSERVERD_APISERVER", ""), "apiserver base URL to send heartbeats and usage to (optional) ($GPUSERVERD_APISERVER)")
	fs.StringVar(&s.cred, "credential", env("GPUSERVERD_CREDENTIAL", ""), "this GPU server's agent credential for --apiserver ($GPUSERVERD_CREDENTIAL)")
	fs.StringVar(&s.advert, "advertise", env("GPUSERVERD_ADVERTISE", ""), "host:port guest libraries dial, reported in heartbeats ($GPUSERVERD_ADVERTISE)")
	fs.StringVar(&s.caFile, "ca-file", env("GPUSERVERD_CA_FILE", ""), "PEM CA certificates to trust for an https --apiserver instead of the system roots ($GPUSERVERD_CA_FILE)")
	fs.DurationVar(&s.usageEvery, "usage-period", 10*time.Second, "how often usage records are shipped to --apiserver")
	fs.DurationVar(&s.adoptTimeout, "adopt-timeout", worker.DefaultAdoptTimeout, "how long a session's worker goes on after its gpuserverd has gone (restart, crash) waiting for a new one to adopt it; one not adopted in time ends its session")
	fs.BoolVar(&s.keepSessions, "keep-sessions-on-stop", false, "on SIGTERM leave the sessions' workers running for the next gpuserverd on this data dir to adopt (an upgrade) instead of ending them; ivshmem sessions end either way")
	fs.DurationVar(&s.checkpoint, "checkpoint-period", 10*time.Second, "how often open sessions' usage is written durably; a gpuserverd killed mid-session loses at most this much of each session")
	fs.DurationVar(&s.hbMax, "max-heartbeat-period", 0, "heartbeat at least this often; 0: as the apiserver asks")
	fs.Uint64Var(&s.shmSessionMiB, "shm-session-mib", server.DefaultShmSessionMax>>20, "the largest shared-memory arena (pinned host memory) one session on --listen-unix may have, MiB; a larger request is refused and told this size")
	fs.IntVar(&s.maxSessions, "max-sessions", server.DefaultMaxSessions, "sessions (worker processes) this server runs at once; one more is refused")
	fs.IntVar(&s.maxPerInstance, "max-sessions-per-instance", server.DefaultMaxSessionsPerInstance, "sessions one instance (all its tokens and processes) may have at once; one more is refused")
	fs.IntVar(&s.maxPending, "max-pending-handshakes", server.DefaultMaxPending, "connections that have not authenticated yet, in all; more are closed at once")
	fs.IntVar(&s.maxPendingPerSource, "max-pending-handshakes-per-source", server.DefaultMaxPendingPerSource, "connections that have not authenticated yet from one address; more are closed at once")
	fs.Uint64Var(&s.shmTotalMiB, "shm-total-mib", 0, "pinned host memory all sessions' arenas may hold together, MiB; 0: half of this machine's RAM")
	return fs
}

func run(ctx context.Context, args []string, log *slog.Logger) error {
	var st settings
	fs := newFlagSet(&st)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if st.config != "" {
		if err := applyConfig(fs, st.config); err != nil {
			return err
		}
	}
	if st.caFile != "" {
		// server.RunHeartbeat uses http.DefaultTransport; make it trust the private CA.
		t, err := tlsconf.Transport(st.caFile)
		if err != nil {
			return fmt.Errorf("--ca-file: %w", err)
		}
		http.DefaultTransport = t
	}
	if st.apiURL != "" && st.cred == "" {
		return errors.New("--apiserver needs --credential")
	}
	b, err := server.OpenBackend(st.kind, log)
	if err != nil {
		return err
	}
	inv := openInventory(b.Kind(), log)
	hb := server.Heartbeat{APIServer: st.apiURL, Credential: st.cred, Endpoint: st.advert, Version: version,
		MaxPeriod: st.hbMax, Inventory: heartbeatInventory(inv)}
	if st.apiURL != "" && (st.id == "" || st.pubKey == "") {
		ack, err := server.Join(ctx, hb, b, log)
		if err != nil {
			return err
		}
		if st.id != "" && st.id != ack.GPUServerID {
			return fmt.Errorf("--id %s, but the credential is GPU server %s's", st.id, ack.GPUServerID)
		}
		st.id = ack.GPUServerID
		if st.pubKey == "" {
			st.pubKey = ack.TokenPublicKey
		}
		log.Info("joined the control plane", "gpu_server_id", st.id)
	}
	key, err := base64.StdEncoding.DecodeString(st.pubKey)
	if err != nil || len(key) != ed25519.PublicKeySize {
		return fmt.Errorf("--public-key: want %d bytes of base64, got %q", ed25519.PublicKeySize, st.pubKey)
	}
	if st.id == "" {
		return errors.New("--id is required (or --apiserver and --credential to learn it)")
	}
	if err := checkShmLimits(st.shmSessionMiB, st.shmTotalMiB); err != nil {
		return err
	}
	if st.ivshmemSlots < 0 || st.ivshmemSlots > ivshmem.MaxSlots {
		return fmt.Errorf("--ivshmem-slots %d: want 0 (by the channel's size) to %d", st.ivshmemSlots, ivshmem.MaxSlots)
	}
	for _, lim := range []struct {
		name string
		v    int
	}{{"--max-sessions", st.maxSessions}, {"--max-sessions-per-instance", st.maxPerInstance},
		{"--max-pending-handshakes", st.maxPending}, {"--max-pending-handshakes-per-source", st.maxPendingPerSource}} {
		if lim.v < 1 || lim.v > 1<<20 {
			return fmt.Errorf("%s %d: want 1 to %d", lim.name, lim.v, 1<<20)
		}
	}
	adminToken := ""
	if st.adminTokenFile != "" {
		b, err := os.ReadFile(st.adminTokenFile)
		if adminToken = strings.TrimSpace(string(b)); err != nil || len(adminToken) < 16 {
			return fmt.Errorf("--admin-token-file %s: want a token of 16 characters or more (%v)", st.adminTokenFile, err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding own binary for workers: %w", err)
	}
	s, err := server.New(server.Config{
		ServerID: st.id, Listen: st.listen, ListenUnix: st.listenUnix, IvshmemDir: st.ivshmemDir, IvshmemPeerTimeout: st.ivshmemTimeout, IvshmemSlots: st.ivshmemSlots, Admin: st.admin, PublicKey: key, BackendKind: b.Kind(),
		WorkerCommand: []string{self, "worker"}, DataDir: st.dataDir, Log: log, CheckpointEvery: st.checkpoint,
		AdoptTimeout: st.adoptTimeout, KeepSessionsOnStop: st.keepSessions,
		ShmSessionMax: st.shmSessionMiB << 20, ShmTotalMax: st.shmTotalMiB << 20,
		MaxSessions: st.maxSessions, MaxSessionsPerInstance: st.maxPerInstance,
		MaxPending: st.maxPending, MaxPendingPerSource: st.maxPendingPerSource, AdminToken: adminToken,
		Monitor: nvmlMonitor(inv, log),
	}, b)
	if err != nil {
		return err
	}
	if err := s.Listen(); err != nil {
		return err
	}
	if st.apiURL != "" {
		go s.RunHeartbeat(ctx, hb)
		go s.ShipUsage(ctx, hb, st.usageEvery)
		go s.RunRevocations(ctx, hb)
		// A restarted server first learns which tokens are revoked, unless the apiserver is away.
		select {
		case <-s.RevocationsSynced():
		case <-time.After(5 * time.Second):
			log.Warn("no revocation list from the apiserver yet; serving, and applying it when it comes")
		case <-ctx.Done():
		}
	}
	// Tests and scripts read the bound addresses from here (useful with port 0).
	fmt.Printf("listening %s admin %s\n", s.Addr(), s.AdminAddr())
	return s.Serve(ctx)
}

// checkShmLimits refuses arena limits no arena could meet or the protocol could not carry.
func checkShmLimits(sessionMiB, totalMiB uint64) error {
	const minMiB, maxMiB = wire.ShmMin >> 20, wire.ShmMax >> 20
	if sessionMiB < minMiB || sessionMiB > maxMiB {
		return fmt.Errorf("--shm-session-mib %d: want %d to %d (the smallest and largest arena)", sessionMiB, minMiB, maxMiB)
	}
	if totalMiB != 0 && totalMiB < minMiB {
		return fmt.Errorf("--shm-total-mib %d: below the smallest arena, %d MiB (0: half of RAM)", totalMiB, minMiB)
	}
	if totalMiB > 1<<40 {
		return fmt.Errorf("--shm-total-mib %d: more than any machine's memory", totalMiB)
	}
	return nil
}

// applyConfig sets each flag named in the file that the command line left unset.
func applyConfig(fs *flag.FlagSet, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	defer f.Close()
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || fs.Lookup(k) == nil || k == "config" {
			return fmt.Errorf("%s line %d: want <flag>=<value> naming one of gpuserverd's flags", path, n)
		}
		if set[k] {
			continue
		}
		if err := fs.Set(k, v); err != nil {
			return fmt.Errorf("%s line %d: %s: %w", path, n, k, err)
		}
	}
	return sc.Err()
}
