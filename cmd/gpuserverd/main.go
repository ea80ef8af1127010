// Command gpuserverd serves remote CUDA sessions on this machine's GPUs.
//
//	gpuserverd --id gs1 --public-key <base64> [--listen :7070] [--admin :7071] [--backend auto]
//	gpuserverd --apiserver URL --credential gcg_... --advertise host:port [...]
//	  (joins the control plane: id and token key come from the apiserver's ack; usage is shipped)
//	gpuserverd worker     (started by gpuserverd itself, one per session)
package main

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"gpucloud/gpuserverd/server"
	"gpucloud/gpuserverd/worker"
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
	} else {
		err = run(ctx, os.Args[1:], log)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpuserverd:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, log *slog.Logger) error {
	fs := flag.NewFlagSet("gpuserverd", flag.ContinueOnError)
	var (
		config     = fs.String("config", "", "file of flag=value lines; flags on the command line win")
		id         = fs.String("id", "", "this GPU server's id (the audience session tokens must name); learnt from the apiserver when unset")
		listen     = fs.String("listen", ":7070", "address guest libraries connect to")
		admin      = fs.String("admin", "127.0.0.1:7071", "HTTP address for /usage, /metrics and /healthz")
		pubKey     = fs.String("public-key", "", "the apiserver's Ed25519 session-token public key, base64; learnt from the apiserver when unset")
		kind       = fs.String("backend", "auto", "auto, cuda or simulated")
		dataDir    = fs.String("data-dir", "/var/lib/gpuserverd", "where usage records are kept")
		apiURL     = fs.String("apiserver", "", "apiserver base URL to send heartbeats to (optional)")
		cred       = fs.String("credential", "", "this GPU server's agent credential for --apiserver")
		advert     = fs.String("advertise", "", "host:port guest libraries dial, reported in heartbeats")
		usageEvery = fs.Duration("usage-period", 10*time.Second, "how often usage records are shipped to --apiserver")
		hbMax      = fs.Duration("max-heartbeat-period", 0, "heartbeat at least this often (0: as the apiserver asks)")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *config != "" {
		if err := applyConfig(fs, *config); err != nil {
			return err
		}
	}
	if *apiURL != "" && *cred == "" {
		return errors.New("--apiserver needs --credential")
	}
	b, err := server.OpenBackend(*kind, log)
	if err != nil {
		return err
	}
	hb := server.Heartbeat{APIServer: *apiURL, Credential: *cred, Endpoint: *advert, Version: version,
		MaxPeriod: *hbMax, Inventory: nvmlInventory(b.Kind(), log)}
	if *apiURL != "" && (*id == "" || *pubKey == "") {
		ack, err := server.Join(ctx, hb, b, log)
		if err != nil {
			return err
		}
		if *id != "" && *id != ack.GPUServerID {
			return fmt.Errorf("--id %s, but the credential is GPU server %s's", *id, ack.GPUServerID)
		}
		*id = ack.GPUServerID
		if *pubKey == "" {
			*pubKey = ack.TokenPublicKey
		}
		log.Info("joined the control plane", "gpu_server_id", *id)
	}
	key, err := base64.StdEncoding.DecodeString(*pubKey)
	if err != nil || len(key) != ed25519.PublicKeySize {
		return fmt.Errorf("--public-key: want %d bytes of base64, got %q", ed25519.PublicKeySize, *pubKey)
	}
	if *id == "" {
		return errors.New("--id is required (or --apiserver and --credential to learn it)")
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding own binary for workers: %w", err)
	}
	s, err := server.New(server.Config{
		ServerID: *id, Listen: *listen, Admin: *admin, PublicKey: key, BackendKind: b.Kind(),
		WorkerCommand: []string{self, "worker"}, DataDir: *dataDir, Log: log,
	}, b)
	if err != nil {
		return err
	}
	if err := s.Listen(); err != nil {
		return err
	}
	if *apiURL != "" {
		go s.RunHeartbeat(ctx, hb)
		go s.ShipUsage(ctx, hb, *usageEvery)
	}
	// Tests and scripts read the bound addresses from here (useful with port 0).
	fmt.Printf("listening %s admin %s\n", s.Addr(), s.AdminAddr())
	return s.Serve(ctx)
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
