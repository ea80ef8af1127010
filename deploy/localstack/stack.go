package main

import (
	"context"
	"fmt"
	"github.com/google/uuid"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"gpucloud/apiserver/app"
	"gpucloud/apiserver/store"
)

// daemons are the local stack's hostd and gpuserverd, running as child processes.
type daemons struct {
	children   []*child
	gpuAddr    string
	hostdAddr  string
	hypervisor string
	catalog    []string
	logs       string
	backend    string // gpuserverd's, as it reported it
}

// startDaemons registers (first run) and starts one gpuserverd and one hostd against the
// apiserver at apiURL, each with its own credential. gpuserverd runs --backend auto: CUDA where
// this machine has a GPU, else the simulated backend (it warns loudly). hostd uses libvirt's
// test driver unless GPUCLOUD_LIBVIRT_URI names a real hypervisor (qemu:///system).
func startDaemons(ctx context.Context, dbURL, apiURL string, log *slog.Logger) (*daemons, error) {
	data, err := filepath.Abs(dataDir())
	if err != nil {
		return nil, err
	}
	st, err := store.Open(ctx, dbURL, 2)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	creds, err := ensureDaemons(ctx, st, filepath.Join(data, "daemons.json"))
	if err != nil {
		return nil, err
	}
	bin, logs := filepath.Join(data, "bin"), filepath.Join(data, "logs")
	for _, d := range []string{bin, logs, filepath.Join(data, "hostd", "images")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	log.Info("building gpuserverd, hostd and the guest library", "into", bin)
	if err := buildDaemons(ctx, bin); err != nil {
		return nil, err
	}
	d := &daemons{logs: logs, hypervisor: envOr("GPUCLOUD_LIBVIRT_URI", "test:///default")}
	if d.gpuAddr, err = addr("GPUCLOUD_GPUSERVERD_ADDR", "127.0.0.1:7070"); err != nil {
		return nil, err
	}
	gpuAdmin, err := addr("", "127.0.0.1:7071")
	if err != nil {
		return nil, err
	}
	gs, err := startChild("gpuserverd", filepath.Join(logs, "gpuserverd.log"), []string{filepath.Join(bin, "gpuserverd"),
		"--apiserver", apiURL, "--listen", d.gpuAddr, "--advertise", d.gpuAddr,
		"--admin", gpuAdmin, "--backend", envOr("GPUCLOUD_GPU_BACKEND", "auto"), "--data-dir", filepath.Join(data, "gpuserverd")},
		// Through the environment, not argv: a credential on the command line shows in ps.
		[]string{"GPUSERVERD_CREDENTIAL=" + creds.GPUServerSecret})
	if err != nil {
		return nil, err
	}
	d.children = append(d.children, gs)
	if d.catalog, err = catalogForGPUs(ctx, st, creds.GPUServerID, log); err != nil {
		d.stop(log)
		return nil, err
	}
	if id, err := uuid.Parse(creds.GPUServerID); err == nil {
		if gs, err := st.GetGPUServer(ctx, id); err == nil {
			d.backend = gs.Backend
		}
	}
	demo := filepath.Join(data, "hostd", "images", "demo.qcow2")
	if err := baseImage(ctx, demo); err != nil {
		d.stop(log)
		return nil, err
	}
	// Registered (again, when its bytes changed) every run: a guest image built later by
	// deploy/guest-image into the same path replaces the empty one.
	if _, err := app.EnsureImage(ctx, st, "demo", demo, 1, false); err != nil {
		d.stop(log)
		return nil, err
	}
	credFile := filepath.Join(data, "host.credential")
	if err := os.WriteFile(credFile, []byte(creds.HostCredential+"\n"), 0o600); err != nil {
		d.stop(log)
		return nil, err
	}
	if d.hostdAddr, err = addr("", "127.0.0.1:9102"); err != nil {
		d.stop(log)
		return nil, err
	}
	hd, err := startChild("hostd", filepath.Join(logs, "hostd.log"), []string{filepath.Join(bin, "hostd"),
		"-apiserver", apiURL, "-credential-file", credFile, "-libvirt-uri", d.hypervisor,
		"-data-dir", filepath.Join(data, "hostd"), "-guest-library", filepath.Join(bin, "libcuda.so.1"),
		"-network", envOr("GPUCLOUD_HOSTD_NETWORK", "user"), "-listen", d.hostdAddr, "-interval", "2s",
		// VMs' SSH ports are forwarded on loopback only: the stack is for this machine.
		"-forward-bind", "127.0.0.1", "-public-host", "127.0.0.1",
		// Interactive serial consoles, for the apiserver on this machine (a free port each run).
		"-console-listen", "127.0.0.1:0",
		// A developer's machine keeps its own InfiniBand VFs: the stack never enables any.
		"-enable-vfs=false"}, nil)
	if err != nil {
		d.stop(log)
		return nil, err
	}
	d.children = append(d.children, hd)
	return d, nil
}

// exited yields the first child that ends on its own.
func (d *daemons) exited() <-chan error {
	out := make(chan error, len(d.children))
	for _, c := range d.children {
		go func() {
			err := <-c.done
			c.done <- err // stop() still sees it
			out <- fmt.Errorf("%s exited: %v (see %s)", c.name, err, filepath.Join(d.logs, c.name+".log"))
		}()
	}
	return out
}

// stop ends the children, the last started first (hostd before gpuserverd).
func (d *daemons) stop(log *slog.Logger) {
	for i := len(d.children) - 1; i >= 0; i-- {
		d.children[i].stop(log)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// addr is $name (port 0 resolved to a free port), or preferred when it is free, or a free
// loopback port. The port is resolved here because it is advertised before the daemon binds it.
func addr(name, preferred string) (string, error) {
	tries := []string{preferred, "127.0.0.1:0"}
	if v := os.Getenv(name); name != "" && v != "" {
		tries = []string{v}
	}
	var err error
	for _, a := range tries {
		var ln net.Listener
		if ln, err = net.Listen("tcp", a); err == nil {
			a = ln.Addr().String()
			ln.Close()
			return a, nil
		}
	}
	return "", fmt.Errorf("no free port for %s: %w", tries[0], err)
}

// baseImage makes the demo image hostd layers VM disks over: an empty disk, which is all
// libvirt's test driver needs. For real VMs put a bootable image there (deploy/guest-image).
func baseImage(ctx context.Context, path string) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	out, err := exec.CommandContext(ctx, "qemu-img", "create", "-q", "-f", "qcow2", path, "10G").CombinedOutput()
	if err != nil {
		return fmt.Errorf("base image %s: %w: %s", path, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (d *daemons) print() {
	if d.backend == "simulated" {
		fmt.Printf("  WARNING: gpuserverd runs the SIMULATED backend (no usable GPU here): CUDA calls reach a\n" +
			"           test double, not a GPU; its GPU names, memory and timings are not real.\n")
	}
	fmt.Printf("  gpuserverd: %s (logs %s/gpuserverd.log)\n  hostd:      %s on %s (logs %s/hostd.log)\n",
		d.gpuAddr, d.logs, d.hostdAddr, d.hypervisor, d.logs)
	for _, c := range d.catalog {
		fmt.Printf("  GPU instance type: %s\n", c)
	}
	fmt.Printf("  try: gpuctl instance-types list; gpuctl instances create vm1 --type <id> --image demo  (tenant key)\n")
}

// dataDir holds the stack's database, keys, binaries and daemon state: $GPUCLOUD_DATA_DIR, or
// .data in the repository (what `make run` uses).
func dataDir() string { return envOr("GPUCLOUD_DATA_DIR", ".data") }
