// Package seed writes the per-VM NoCloud seed: a small ISO labelled "cidata" that cloud-init
// reads at first boot. It installs the guest library as the guest's libcuda.so.1 and writes
// /etc/gpucloud/guest.conf with the gpuserverd endpoints, the session token and the tier.
//
// The same files also lie plainly on the ISO under gpucloud/, so a guest without cloud-init (the
// test's busybox initramfs, a base image built by deploy/guest-image) can mount it and read them,
// and so a renewed token reaches a running guest: hostd rebuilds the ISO and swaps the VM's cdrom
// media; the refresh timer installed by user-data copies gpucloud/guest.conf over
// /etc/gpucloud/guest.conf, and the guest library reads that file whenever it (re)connects.
package seed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Config is what one VM's seed carries.
type Config struct {
	InstanceID     string
	Hostname       string
	Endpoints      []string // gpuserverd host:port, in preference order
	Token          string
	TokenExpiresAt time.Time
	Tier           string
	GPUModel       string
	// SSHKeys are the authorized_keys lines of the default user (one key per line each).
	SSHKeys []string
	// UserData is the tenant's cloud-init user-data ("#cloud-config" or "#!"), run after
	// gpucloud's own part; "" for none.
	UserData string
	// Library is the guest libcuda.so.1; nil leaves the guest's own (no GPU remoting).
	Library []byte
}

// Validate rejects values that would break the line-based guest.conf or the YAML around them.
func (c Config) Validate() error {
	check := func(field, v string) error {
		if strings.ContainsAny(v, "\n\r\x00\"'\\") {
			return fmt.Errorf("seed: %s contains a newline, quote, backslash or NUL", field)
		}
		return nil
	}
	if c.InstanceID == "" {
		return errors.New("seed: instance id is empty")
	}
	fields := map[string]string{"instance id": c.InstanceID, "hostname": c.Hostname, "token": c.Token,
		"tier": c.Tier, "gpu model": c.GPUModel}
	for i, k := range c.SSHKeys {
		if k == "" || strings.ContainsAny(k, "\n\r\x00") {
			return fmt.Errorf("seed: ssh key %d is empty or spans lines", i)
		}
	}
	if len(c.UserData) > 16<<10 {
		return errors.New("seed: user-data is over 16 KiB")
	}
	for i, e := range c.Endpoints {
		fields[fmt.Sprintf("endpoint %d", i)] = e
		if strings.ContainsAny(e, ", \t") {
			return fmt.Errorf("seed: endpoint %d %q contains a comma or space", i, e)
		}
	}
	for f, v := range fields {
		if err := check(f, v); err != nil {
			return err
		}
	}
	return nil
}

// GuestConf is the guest library's configuration file, KEY=VALUE lines.
func GuestConf(c Config) []byte {
	var b bytes.Buffer
	first := ""
	if len(c.Endpoints) > 0 {
		first = c.Endpoints[0]
	}
	fmt.Fprintf(&b, "# Written by gpucloud hostd; replaced when the session token is renewed.\n")
	fmt.Fprintf(&b, "GPUCLOUD_INSTANCE_ID=%s\n", c.InstanceID)
	fmt.Fprintf(&b, "GPUCLOUD_ENDPOINT=%s\n", first)
	fmt.Fprintf(&b, "GPUCLOUD_ENDPOINTS=%s\n", strings.Join(c.Endpoints, ","))
	fmt.Fprintf(&b, "GPUCLOUD_TOKEN=%s\n", c.Token)
	if !c.TokenExpiresAt.IsZero() {
		fmt.Fprintf(&b, "GPUCLOUD_TOKEN_EXPIRES=%s\n", c.TokenExpiresAt.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(&b, "GPUCLOUD_TIER=%s\n", c.Tier)
	if c.GPUModel != "" {
		fmt.Fprintf(&b, "GPUCLOUD_GPU_MODEL=%s\n", c.GPUModel)
	}
	return b.Bytes()
}

// Build writes the seed ISO to path, atomically: a VM never sees half an image.
func Build(ctx context.Context, c Config, path string) error {
	if err := c.Validate(); err != nil {
		return err
	}
	ud, err := UserData(c)
	if err != nil {
		return err
	}
	// Staging dirs of a build that was killed half-way are the only thing one can leave behind.
	stale, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".seed-*"))
	for _, d := range stale {
		os.RemoveAll(d)
	}
	stage, err := os.MkdirTemp(filepath.Dir(path), ".seed-")
	if err != nil {
		return fmt.Errorf("seed: staging dir: %w", err)
	}
	defer os.RemoveAll(stage)
	// The keys and the tenant's user-data also lie plainly on the ISO, for guests without
	// cloud-init (the test appliance reads them from there).
	files := map[string][]byte{
		"user-data":                ud,
		"meta-data":                MetaData(c),
		"gpucloud/guest.conf":      GuestConf(c),
		"gpucloud/authorized_keys": []byte(strings.Join(c.SSHKeys, "\n") + "\n"),
	}
	if c.UserData != "" {
		files["gpucloud/user-data"] = []byte(c.UserData)
	}
	if c.Library != nil {
		files["gpucloud/libcuda.so.1"] = c.Library
	}
	for name, data := range files {
		p := filepath.Join(stage, "root", name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("seed: %w", err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return fmt.Errorf("seed: write %s: %w", name, err)
		}
	}
	tmp := filepath.Join(stage, "seed.iso")
	cmd := exec.CommandContext(ctx, "genisoimage", "-quiet", "-output", tmp, "-volid", "cidata",
		"-joliet", "-rock", filepath.Join(stage, "root"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("seed: genisoimage: %w: %s", err, bytes.TrimSpace(out))
	}
	// The seed holds a session token: only root (and the QEMU user libvirt hands it to) reads it.
	if err := os.Chmod(tmp, 0o600); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("seed: install %s: %w", path, err)
	}
	return nil
}
