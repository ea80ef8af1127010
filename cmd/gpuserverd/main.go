// Command gpuserverd serves remote CUDA sessions on this machine's GPUs.
//
//	gpuserverd --id gs1 --public-key <base64> [--listen :7070] [--admin :7071] [--backend auto]
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
		config  = fs.String("config", "", "file of flag=value lines; flags on the command line win")
		id      = fs.String("id", "", "this GPU server's id (the audience session tokens must name)")
		listen  = fs.String("listen", ":7070", "address guest libraries connect to")
		admin   = fs.String("admin", "127.0.0.1:7071", "HTTP address for /usage, /metrics and /healthz")
		pubKey  = fs.String("public-key", "", "the apiserver's Ed25519 session-token public key, base64")
		kind    = fs.String("backend", "auto", "auto, cuda or simulated")
		dataDir = fs.String("data-dir", "/var/lib/gpuserverd", "where usage records are kept")
		apiURL  = fs.String("apiserver", "", "apiserver base URL to send heartbeats to (optional)")
		cred    = fs.String("credential", "", "this GPU server's agent credential for --apiserver")
		advert  = fs.String("advertise", "", "host:port guest libraries dial, reported in heartbeats")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *config != "" {
		if err := applyConfig(fs, *config); err != nil {
			return err
		}
	}
	key, err := base64.StdEncoding.DecodeString(*pubKey)
	if err != nil || len(key) != ed25519.PublicKeySize {
		return fmt.Errorf("--public-key: want %d bytes of base64, got %q", ed25519.PublicKeySize, *pubKey)
	}
	if *id == "" {
		return errors.New("--id is required")
	}
	b, err := server.OpenBackend(*kind, log)
	if err != nil {
		return err
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
		if *cred == "" {
			return errors.New("--apiserver needs --credential")
		}
		go s.RunHeartbeat(ctx, server.Heartbeat{APIServer: *apiURL, Credential: *cred, Endpoint: *advert, Version: version})
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
