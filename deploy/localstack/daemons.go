package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"

	"gpucloud/apiserver/store"
	"gpucloud/internal/authn"
)

// daemonCreds are the local host's and GPU server's agent credentials, made on first run as an
// operator would (POST /v1/hosts, /v1/gpu-servers) and kept in .data/ (mode 0600).
type daemonCreds struct {
	HostID          string `json:"host_id"`
	HostCredential  string `json:"host_credential"`
	GPUServerID     string `json:"gpu_server_id"`
	GPUServerSecret string `json:"gpu_server_credential"`
}

func ensureDaemons(ctx context.Context, st *store.Store, path string) (daemonCreds, error) {
	return firstRun(path, func() (daemonCreds, error) {
		ctx := authn.WithPrincipal(ctx, authn.Principal{Role: "bootstrap"})
		hid, hcred, err := st.CreateDaemon(ctx, store.KindHost, "local-host")
		if err != nil {
			return daemonCreds{}, fmt.Errorf("register the local host: %w", err)
		}
		gid, gcred, err := st.CreateDaemon(ctx, store.KindGPUServer, "local-gpu-server")
		if err != nil {
			return daemonCreds{}, fmt.Errorf("register the local GPU server: %w", err)
		}
		return daemonCreds{HostID: hid.String(), HostCredential: hcred, GPUServerID: gid.String(), GPUServerSecret: gcred}, nil
	})
}

// firstRun reads what an earlier run recorded at path; where nothing is recorded yet, it makes
// it and records it (JSON, mode 0600: it holds secrets), so later runs print the same.
func firstRun[T any](path string, make func() (T, error)) (T, error) {
	var v T
	raw, err := os.ReadFile(path)
	if err == nil {
		if err := json.Unmarshal(raw, &v); err != nil {
			return v, fmt.Errorf("%s: %w (delete the data dir to start over)", path, err)
		}
		return v, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return v, err
	}
	if v, err = make(); err != nil {
		return v, err
	}
	data, _ := json.MarshalIndent(v, "", "  ")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return v, fmt.Errorf("write %s: %w", path, err)
	}
	return v, nil
}

// buildDaemons builds gpuserverd, hostd and the guest library into dir, so the stack runs the
// same binaries a deployment does, as child processes.
func buildDaemons(ctx context.Context, dir string) error {
	for _, s := range [][]string{
		{"go", "build", "-o", dir + "/", "./cmd/gpuserverd", "./cmd/hostd"},
		{"make", "-s", "-C", "gpuserverd/guest", "BUILD=" + dir},
	} {
		out, err := exec.CommandContext(ctx, s[0], s[1:]...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("build %v: %w\n%s", s, err, out)
		}
	}
	return nil
}

// child is a daemon the stack started. It dies with the stack (Pdeathsig) even if the stack is
// killed; on a clean stop it gets SIGTERM and 10 s before SIGKILL.
type child struct {
	name string
	cmd  *exec.Cmd
	done chan error
}

func startChild(name, logPath string, args []string, env []string) (*child, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%s log: %w", name, err)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), env...)
	// Its own process group: Ctrl-C reaches the stack only, which stops children in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, done: make(chan error, 1)}
	go func() {
		c.done <- cmd.Wait()
		logf.Close()
	}()
	return c, nil
}

// stop ends the child and waits for it.
func (c *child) stop(log *slog.Logger) {
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return // already gone
	}
	select {
	case err := <-c.done:
		log.Info("stopped", "daemon", c.name, "exit", err)
	case <-time.After(10 * time.Second):
		log.Warn("did not stop in 10 s; killing", "daemon", c.name)
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		<-c.done
	}
}

// catalogForGPUs waits (up to 60 s) for the GPU server's first heartbeat and gives every GPU
// name it reports that no model matches a model of its own, with a shared and a dedicated
// instance type sized for the local host, so a tenant can create a GPU VM right away: the
// simulated backend's GPUs, or the real GPU's NVML name.
func catalogForGPUs(ctx context.Context, st *store.Store, gpuServer string, log *slog.Logger) ([]string, error) {
	id, err := uuid.Parse(gpuServer)
	if err != nil {
		return nil, fmt.Errorf("GPU server id %q: %w", gpuServer, err)
	}
	var gs store.GPUServer
	for deadline := time.Now().Add(60 * time.Second); ; {
		if gs, err = st.GetGPUServer(ctx, id); err != nil {
			return nil, err
		}
		if len(gs.GPUs) > 0 {
			break
		}
		if time.Now().After(deadline) {
			return nil, errors.New("gpuserverd reported no GPU in 60 s (see .data/logs/gpuserverd.log)")
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	ctx = authn.WithPrincipal(ctx, authn.Principal{Role: "bootstrap"})
	models := map[uuid.UUID]string{} // the reported GPUs' models, by id
	for i, g := range gs.GPUs {
		if g.GPUModelID != nil {
			models[*g.GPUModelID] = g.Name
			continue
		}
		m := store.GPUModel{Name: g.Name, MemoryBytes: g.MemoryBytes, NVMLMatch: g.Name}
		if err := st.CreateGPUModel(ctx, &m); err != nil {
			return nil, fmt.Errorf("catalog for %q: %w", g.Name, err)
		}
		models[m.ID] = g.Name
		for j := i; j < len(gs.GPUs); j++ { // later GPUs of the same name match this model now
			if gs.GPUs[j].Name == g.Name {
				gs.GPUs[j].GPUModelID = &m.ID
			}
		}
	}
	types, err := st.ListInstanceTypes(ctx, uuid.Nil, 1000)
	if err != nil {
		return nil, err
	}
	// Every local GPU model gets small "local-" types that fit this host (libvirt's test driver
	// offers 3 GiB), even where the demo catalog's bigger types already match the GPU.
	n := 0
	for id, gpu := range models {
		has := false
		for _, it := range types {
			has = has || (it.GPUModelID != nil && *it.GPUModelID == id && strings.HasPrefix(it.Name, "local-"))
		}
		if has {
			continue
		}
		n++
		for _, it := range []store.InstanceType{
			{Name: fmt.Sprintf("local-gpu%d-shared", n), VCPUs: 1, MemoryMiB: 1024, DiskGiB: 10, GPUModelID: &id, GPUCount: 1, Tier: "shared", PricePerHour: 45, Currency: "USD"},
			{Name: fmt.Sprintf("local-gpu%d-dedicated", n), VCPUs: 2, MemoryMiB: 2048, DiskGiB: 20, GPUModelID: &id, GPUCount: 1, Tier: "dedicated", PricePerHour: 300, Currency: "USD"},
		} {
			if err := st.CreateInstanceType(ctx, &it); err != nil {
				return nil, fmt.Errorf("catalog for %q: %w", gpu, err)
			}
			types = append(types, it)
		}
		log.Info("catalog: instance types for the local GPU", "gpu", gpu)
	}
	if err := seedPriceBook(ctx, st); err != nil {
		return nil, err
	}
	var out []string
	for _, it := range types {
		if it.GPUModelID != nil && models[*it.GPUModelID] != "" {
			out = append(out, fmt.Sprintf("%s %s (%s, %d vCPU, %d MiB)", it.ID, it.Name, models[*it.GPUModelID], it.VCPUs, it.MemoryMiB))
		}
	}
	return out, nil
}
