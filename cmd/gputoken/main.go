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
	count := fs.Int("count", 1, "how many tokens, one per line, signed with the same key; sessions <session>-1..N when over 1")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *pubOut == "" {
		return errors.New("-public-key-out is required")
	}
	if *gpus == "" {
		return errors.New("-gpus is required (e.g. the UUID nvidia-smi -L prints)")
	}
	if *count < 1 || *count > 64 {
		return fmt.Errorf("-count %d: must be 1 to 64", *count)
	}
	if *ttl <= 0 {
		return fmt.Errorf("-ttl %v: must be positive", *ttl)
	}
	sid := *session
	if sid == "" {
		sid = fmt.Sprintf("gputest-%d", now.UnixNano())
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return fmt.Errorf("generate key: %w", err)
	}
	var tokens []string
	for i := 1; i <= *count; i++ {
		id := sid
		if *count > 1 { // concurrent sessions need ids of their own
			id = fmt.Sprintf("%s-%d", sid, i)
		}
		c := sessiontoken.Claims{
			SessionID: id, TenantID: *tenant, InstanceID: *instance, GPUServer: *server,
			GPUs: strings.Split(*gpus, ","), Tier: *tier, MemoryQuota: *quota,
			IssuedAt: now.Unix(), ExpiresAt: now.Add(*ttl).Unix(),
		}
		token, err := sessiontoken.Sign(priv, c)
		if err != nil {
			return fmt.Errorf("sign: %w", err)
		}
		tokens = append(tokens, token)
	}
	if err := os.WriteFile(*pubOut, []byte(base64.StdEncoding.EncodeToString(pub)+"\n"), 0o644); err != nil {
		return fmt.Errorf("write public key: %w", err)
	}
	_, err = fmt.Fprintln(out, strings.Join(tokens, "\n"))
	return err
}
