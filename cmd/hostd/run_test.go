package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gpucloud/api"
	"gpucloud/hostd/controlplane/cpfake"
)

// TestDaemonServesAndReconciles runs the daemon's wiring against the fake control plane and a
// private libvirt test driver, then checks /healthz, /metrics and that the VM came up.
func TestDaemonServesAndReconciles(t *testing.T) {
	dir := t.TempDir()
	node := filepath.Join(dir, "node.xml")
	os.WriteFile(node, []byte("<node></node>\n"), 0o644)
	os.MkdirAll(filepath.Join(dir, "data", "images"), 0o755)
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", filepath.Join(dir, "data", "images", "base.qcow2"), "16M").CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	cp := cpfake.New(t, "cred")
	cp.Put(api.DesiredInstance{ID: "d1", TenantID: "t1", DesiredState: api.DesiredRunning,
		Spec:  api.InstanceSpec{VCPUs: 1, MemoryMiB: 128, DiskGiB: 1, Image: "base"},
		Token: api.SessionToken{Token: "tk", ExpiresAt: time.Now().Add(time.Hour)}})
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	o, err := parseFlags([]string{"-apiserver", cp.URL(), "-credential", "cred", "-libvirt-uri", "test://" + node,
		"-data-dir", filepath.Join(dir, "data"), "-sysfs-root", filepath.Join(dir, "sys"), "-listen", addr, "-interval", "1s"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, o, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	defer func() {
		cancel()
		<-done
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("healthz never ok: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if obs, _ := cp.Observed("d1"); obs.State != api.ObservedRunning {
		t.Fatalf("observed %+v", obs)
	}
	// No /sys/class/infiniband under this sysfs root: the host offers no VFs, and says so.
	if n, rep := cp.Heartbeats(); n == 0 || rep.Capacity.InfiniBandVFs != 0 || rep.Capacity.VCPUs == 0 {
		t.Fatalf("heartbeats %d, report %+v", n, rep)
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "hostd_reconcile_passes_total") || !strings.Contains(string(b), `hostd_domain_actions_total{action="start"}`) {
		t.Fatalf("metrics lack hostd counters:\n%.2000s", b)
	}
	if !strings.Contains(string(b), `hostd_domain{instance="d1",state="running"} 1`) {
		t.Fatalf("metrics do not show the running domain:\n%.4000s", b)
	}
}
