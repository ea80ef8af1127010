package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"

	"gpucloud/api"
	"gpucloud/hostd/seed"
)

// refreshSeed writes the instance's seed when it is missing, carries another token than the one
// to use, or names other GPU endpoints than the apiserver's (a drain moved the instance's GPU
// sessions to another GPU server: the VM's new processes must dial that one), renewing the token
// first when it is near expiry. With a domain (name != "") the
// rebuilt seed is swapped into its cdrom so a running guest picks the new token up.
func (r *Reconciler) refreshSeed(ctx context.Context, d api.DesiredInstance, name string, live bool) error {
	p := r.paths(d.ID)
	written, err := readToken(p.token)
	if err != nil {
		return err
	}
	tok := d.Token
	if written.ExpiresAt.After(tok.ExpiresAt) {
		tok = written.SessionToken // renewed here earlier; the apiserver's list may still show the old one
	}
	if !tok.ExpiresAt.IsZero() && tok.ExpiresAt.Sub(r.cfg.Now()) < r.cfg.TokenRenewBefore {
		renewed, err := r.cfg.ControlPlane.RenewToken(ctx, d.ID)
		if err != nil {
			return fmt.Errorf("renew session token: %w", err)
		}
		r.log.Info("renewed session token", "instance", d.ID, "expires", renewed.ExpiresAt)
		tok = renewed
	}
	var endpoints []string
	if d.GPU != nil {
		endpoints = d.GPU.Endpoints
	}
	if _, err := os.Stat(p.seed); err == nil && written.Token == tok.Token && slices.Equal(written.Endpoints, endpoints) {
		return nil
	}
	cfg := seed.Config{InstanceID: d.ID, Hostname: d.Name, Token: tok.Token, TokenExpiresAt: tok.ExpiresAt,
		SSHKeys: authorizedKeys(d.Spec), UserData: d.Spec.UserData}
	if g := d.GPU; g != nil {
		cfg.Endpoints, cfg.Tier, cfg.GPUModel = g.Endpoints, g.Tier, g.Model
		if r.channelFor(d) != nil { // the VM's own channel first; the library finds the device
			cfg.Endpoints = append([]string{"ivshmem:auto"}, g.Endpoints...)
		}
	}
	if r.cfg.GuestLibrary != "" {
		lib, err := os.ReadFile(r.cfg.GuestLibrary)
		if err != nil {
			return fmt.Errorf("guest library: %w", err)
		}
		cfg.Library = lib
	}
	if err := seed.Build(ctx, cfg, p.seed); err != nil {
		return err
	}
	if err := writeToken(p.token, tokenRecord{SessionToken: tok, Endpoints: endpoints}); err != nil {
		return err
	}
	if live {
		if err := r.cfg.Hypervisor.ChangeMedia(name, p.seed); err != nil {
			return err
		}
		actions.WithLabelValues("seed_swap").Inc()
	}
	return nil
}

// tokenRecord is what the instance's seed was last built with: its token and GPU endpoints.
type tokenRecord struct {
	api.SessionToken
	Endpoints []string `json:"endpoints,omitempty"`
}

func readToken(path string) (tokenRecord, error) {
	var t tokenRecord
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return t, nil
	}
	if err != nil {
		return t, fmt.Errorf("read %s: %w", path, err)
	}
	if err := json.Unmarshal(b, &t); err != nil {
		// A torn write from a killed hostd: treat as absent, the seed is rebuilt.
		return tokenRecord{}, nil
	}
	return t, nil
}

func writeToken(path string, t tokenRecord) error {
	b, err := json.Marshal(t)
	if err != nil {
		return fmt.Errorf("encode token record: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write token record: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write token record: %w", err)
	}
	return nil
}

// authorizedKeys is every key the VM accepts: the resolved list, and the single key of an
// apiserver that sends only that.
func authorizedKeys(s api.InstanceSpec) []string {
	keys := append([]string(nil), s.SSHKeys...)
	if s.SSHKey != "" && !slices.Contains(keys, s.SSHKey) {
		keys = append(keys, s.SSHKey)
	}
	return keys
}
