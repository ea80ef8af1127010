package tenantfw

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
)

// Firewall applies rulesets with nft and keeps them applied.
type Firewall struct {
	// Command runs nft: {"nft"} when empty. Tests prefix it to work in a network namespace
	// ({"ip", "netns", "exec", "<ns>", "nft"}).
	Command []string
	Log     *slog.Logger

	mu      sync.Mutex
	script  string // the last script applied
	listing string // the table as nft listed it right after
}

// Reconcile makes the kernel's table match rs: applied when rs changed or when the table differs
// from what the last apply left (edited, flushed or deleted by someone else), left alone
// otherwise. It reports whether it applied.
func (f *Firewall) Reconcile(ctx context.Context, rs Ruleset) (bool, error) {
	script, err := Render(rs)
	if err != nil {
		return false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	current, err := f.list(ctx)
	if err != nil {
		return false, err
	}
	if script == f.script && current == f.listing {
		return false, nil
	}
	if f.script != "" && script == f.script && f.Log != nil {
		f.Log.Warn("tenant firewall drifted from what hostd applied; re-applying", "table", "inet "+Table)
	}
	if _, err := f.nft(ctx, script, "-f", "-"); err != nil {
		return false, fmt.Errorf("tenantfw: apply: %w", err)
	}
	listing, err := f.list(ctx)
	if err != nil {
		return false, err
	}
	f.script, f.listing = script, listing
	return true, nil
}

// Listing is the table as the kernel has it now ("" when there is none).
func (f *Firewall) Listing(ctx context.Context) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.list(ctx)
}

// list is `nft list table`; a missing table is "" (as after applying an empty ruleset).
func (f *Firewall) list(ctx context.Context) (string, error) {
	out, err := f.nft(ctx, "", "list", "table", "inet", Table)
	if err != nil {
		if strings.Contains(err.Error(), "No such file or directory") {
			return "", nil
		}
		return "", fmt.Errorf("tenantfw: list: %w", err)
	}
	return out, nil
}

func (f *Firewall) nft(ctx context.Context, stdin string, args ...string) (string, error) {
	argv := f.Command
	if len(argv) == 0 {
		argv = []string{"nft"}
	}
	cmd := exec.CommandContext(ctx, argv[0], append(argv[1:len(argv):len(argv)], args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", strings.Join(argv, " "), strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}
