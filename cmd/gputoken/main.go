// Command gputoken mints a session token for testing gpuserverd outside the control plane (the
// GPU machine's scripted run): it makes a fresh Ed25519 key pair, writes the public key where
// gpuserverd reads it (base64, as api.GPUServerAck.TokenPublicKey carries it) and prints a token
// signed with the private key, which is then thrown away.
package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"gpucloud/internal/sessiontoken"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, time.Now()); err != nil {
		fmt.Fprintln(os.Stderr, "gputoken:", err)
		os.Exit(2)
	}
}

func run(args []string, out io.Writer, now time.Time) error {
	fs := flag.NewFlagSet("gputoken", flag.ContinueOnError)
	pubOut := fs.String("public-key-out", "", "file to write the base64 Ed25519 public key to (required)")
	server := fs.String("server", "gs-local", "GPU server id the token is for (its audience)")
	gpus := fs.String("gpus", "", "comma-separated GPU UUIDs the session may use (required)")
	tier := fs.String("tier", sessiontoken.TierDedicated, "dedicated or shared")
	quota := fs.Uint64("quota", 0, "GPU memory quota in bytes per GPU (required for shared)")
	ttl := fs.Duration("ttl", time.Hour, "token lifetime")
	tenant := fs.String("tenant", "tenant-gputest", "tenant id")
	instance := fs.String("instance", "instance-gputest", "instance id")
	session := fs.String("session", "", "session id (default: derived from the time)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *pubOut == "" {
		return errors.New("-public-key-out is required")
	}
	if *gpus == "" {
		return errors.New("-gpus is required (e.g. the UUID nvidia-smi -L prints)")
	}
	if *ttl <= 0 {
		return fmt.Errorf("-ttl %v: must be positive", *ttl)
	}
	sid := *session
	if sid == "" {
		sid = fmt.Sprintf("gputest-%d", now.UnixNano())
	}
	c := sessiontoken.Claims{
		SessionID: sid, TenantID: *tenant, InstanceID: *instance, GPUServer: *server,
		GPUs: strings.Split(*gpus, ","), Tier: *tier, MemoryQuota: *quota,
		IssuedAt: now.Unix(), ExpiresAt: now.Add(*ttl).Unix(),
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return fmt.Errorf("generate key: %w", err)
	}
	token, err := sessiontoken.Sign(priv, c)
	if err != nil {
		return fmt.Errorf("sign: %w", err)
	}
	if err := os.WriteFile(*pubOut, []byte(base64.StdEncoding.EncodeToString(pub)+"\n"), 0o644); err != nil {
		return fmt.Errorf("write public key: %w", err)
	}
	_, err = fmt.Fprintln(out, token)
	return err
}
