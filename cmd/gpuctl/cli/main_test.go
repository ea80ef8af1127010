package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gpucloud/cmd/gpuctl/cli"
	"gpucloud/internal/pgtest"
	"gpucloud/sdk"
	"gpucloud/sdk/sdktest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// harness runs gpuctl in-process against a running apiserver.
type harness struct {
	t   *testing.T
	e   *sdktest.Env
	env map[string]string
}

func newHarness(t *testing.T) *harness {
	e := sdktest.New(t)
	return &harness{t: t, e: e, env: map[string]string{
		"XDG_CONFIG_HOME":  t.TempDir(),
		"GPUCLOUD_API_URL": e.URL,
		"GPUCLOUD_API_KEY": e.Operator,
	}}
}

type result struct {
	code     int
	out, err string
}

// as runs gpuctl with the given API key (empty: the environment's, the operator's).
func (h *harness) as(key string, args ...string) result {
	h.t.Helper()
	env := map[string]string{}
	for k, v := range h.env {
		env[k] = v
	}
	if key != "" {
		env["GPUCLOUD_API_KEY"] = key
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	code := cli.Run(ctx, args, cli.IO{Out: &out, Err: &errb, Getenv: func(k string) string { return env[k] },
		Retry: sdk.RetryPolicy{MaxAttempts: 2, MinBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}})
	return result{code, out.String(), errb.String()}
}

func (h *harness) run(args ...string) result { h.t.Helper(); return h.as("", args...) }

// ok runs a command that must succeed.
func (h *harness) ok(key string, args ...string) string {
	h.t.Helper()
	r := h.as(key, args...)
	if r.code != 0 {
		h.t.Fatalf("gpuctl %s: exit %d\n%s%s", strings.Join(args, " "), r.code, r.out, r.err)
	}
	return r.out
}

// code runs a command that must fail with want, and returns its stderr.
func (h *harness) code(want int, key string, args ...string) string {
	h.t.Helper()
	r := h.as(key, args...)
	if r.code != want {
		h.t.Fatalf("gpuctl %s: exit %d, want %d\n%s%s", strings.Join(args, " "), r.code, want, r.out, r.err)
	}
	if !strings.Contains(r.err, "gpuctl: ") {
		h.t.Fatalf("gpuctl %s: error not reported on stderr: %q", strings.Join(args, " "), r.err)
	}
	return r.err
}

// jsonOf runs a command with -o json that must succeed, decoding its output into v.
func (h *harness) jsonOf(v any, key string, args ...string) {
	h.t.Helper()
	out := h.ok(key, append(args, "-o", "json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		h.t.Fatalf("gpuctl %s -o json: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func (h *harness) configFile() string {
	return filepath.Join(h.env["XDG_CONFIG_HOME"], "gpucloud", "config.yaml")
}
