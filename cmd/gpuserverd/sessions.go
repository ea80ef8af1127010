package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// sessionsUsage is `gpuserverd sessions`'s help.
const sessionsUsage = `usage: gpuserverd sessions [flags] list
       gpuserverd sessions [flags] [--stop] checkpoint SESSION
       gpuserverd sessions [flags] migrate SESSION TARGET TOKEN-FILE [GUEST-ADDRESS]
       gpuserverd sessions [flags] restore CHECKPOINT TOKEN-FILE

Asks this machine's gpuserverd, on its admin port, to list its sessions, checkpoint one (with
--stop: and end it here, for a restore), move one to the gpuserverd at TARGET (host:port) with a
session token for that server, or restore a checkpoint (docs/gpuserverd/sessions.md,
"Checkpoint, restore and live migration").
`

// sessionsCmd is `gpuserverd sessions`: the admin API's mobility routes for an operator.
func sessionsCmd(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("sessions", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	admin := fs.String("admin", env("GPUSERVERD_ADMIN", "127.0.0.1:7071"), "gpuserverd's admin address ($GPUSERVERD_ADMIN)")
	dataDir := fs.String("data-dir", env("GPUSERVERD_DATA_DIR", "/var/lib/gpuserverd"), "gpuserverd's data dir, where its admin token is ($GPUSERVERD_DATA_DIR)")
	tokenFile := fs.String("admin-token-file", env("GPUSERVERD_ADMIN_TOKEN_FILE", ""), "the admin token's file (unset: <data-dir>/admin-token) ($GPUSERVERD_ADMIN_TOKEN_FILE)")
	stop := fs.Bool("stop", false, "checkpoint: end the session here once written, for a restore")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w\n%s", err, sessionsUsage)
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return errors.New(sessionsUsage)
	}
	tf := *tokenFile
	if tf == "" {
		tf = filepath.Join(*dataDir, "admin-token")
	}
	tok, err := os.ReadFile(tf)
	if err != nil {
		return fmt.Errorf("admin token: %w", err)
	}
	c := adminClient{base: "http://" + *admin, token: strings.TrimSpace(string(tok))}
	readToken := func(path string) (string, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("session token: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	var method, path string
	var body any
	switch op, n := rest[0], len(rest); {
	case op == "list" && n == 1:
		method, path = http.MethodGet, "/admin/sessions"
	case op == "checkpoint" && n == 2:
		method, path, body = http.MethodPost, "/admin/sessions/"+rest[1]+"/checkpoint", map[string]bool{"stop": *stop}
	case op == "migrate" && (n == 4 || n == 5):
		t, err := readToken(rest[3])
		if err != nil {
			return err
		}
		req := map[string]string{"target": rest[2], "token": t}
		if n == 5 {
			req["guest_address"] = rest[4]
		}
		method, path, body = http.MethodPost, "/admin/sessions/"+rest[1]+"/migrate", req
	case op == "restore" && n == 3:
		t, err := readToken(rest[2])
		if err != nil {
			return err
		}
		method, path, body = http.MethodPost, "/admin/restore", map[string]string{"path": rest[1], "token": t}
	default:
		return fmt.Errorf("%q with %d operands\n%s", op, n-1, sessionsUsage)
	}
	return c.do(ctx, method, path, body, out)
}

type adminClient struct{ base, token string }

// do sends the request and copies the answer to out; a non-2xx answer is an error carrying it.
func (c adminClient) do(ctx context.Context, method, path string, body any, out io.Writer) error {
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Minute) // a migration of a large session
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, r)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("gpuserverd admin: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("gpuserverd admin: %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	_, err = out.Write(b)
	return err
}
