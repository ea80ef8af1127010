package main

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"gpucloud/sdk"
)

// TestLocalStackRunsAndStopsCleanly runs the stack as `make run` does (its own data dir and
// ports): it must come up with a catalog for the GPU gpuserverd reports, take a tenant's GPU VM
// to running through hostd, and on SIGINT stop every child process and PostgreSQL.
func TestLocalStackRunsAndStopsCleanly(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the whole stack")
	}
	// Not t.TempDir: PostgreSQL runs as its own user (pglocal), which must reach the data dir.
	dir, err := os.MkdirTemp("", "localstack-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "localstack")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	data := filepath.Join(dir, "data")
	cmd := exec.Command(bin)
	cmd.Dir = "../.." // the repository root, as `make run`
	cmd.Env = append(os.Environ(), "GPUCLOUD_DATA_DIR="+data, "GPUCLOUD_APISERVER_ADDR=127.0.0.1:0",
		"GPUCLOUD_GPUSERVERD_ADDR=127.0.0.1:0", "GPUCLOUD_DATABASE_URL=")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
		}
	}()
	banner := make(chan string, 1)
	go func() {
		var b strings.Builder
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			b.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), "press Ctrl-C") {
				banner <- b.String()
			}
		}
	}()
	var text string
	select {
	case text = <-banner:
	case err := <-exited:
		t.Fatalf("stack exited before it was up: %v", err)
	case <-time.After(3 * time.Minute):
		t.Fatal("stack not up in 3 minutes")
	}
	t.Logf("banner:\n%s", text)
	api := find(t, text, `apiserver: (http://\S+)`)
	key := find(t, text, `demo tenant admin key:\s+(\S+)`)
	typ := find(t, text, `GPU instance type: (\S+) local-\S+-shared`)
	find(t, text, `finance@localhost\s+finance\s+password: (\S+)`)

	c, err := sdk.New(api, key)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	inst, err := c.CreateInstance(ctx, sdk.CreateInstanceRequest{Name: "smoke", InstanceTypeID: typ, Image: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	if inst, err = c.WaitInstance(ctx, inst.ID, 200*time.Millisecond, nil, sdk.StateRunning, sdk.StateFailed); err != nil || inst.State != sdk.StateRunning {
		t.Fatalf("instance %+v: %v", inst, err)
	}
	// The demo price book prices what the instance holds: its slice, its VM and its disk.
	priced := map[string]bool{}
	for p, err := range c.Prices(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		priced[p.Kind+"/"+p.Tier+"/"+p.InstanceType] = true
	}
	typeName := find(t, text, `GPU instance type: \S+ (local-\S+-shared)`)
	for _, k := range []string{"gpu/shared/", "vm//" + typeName, "storage//"} {
		if !priced[k] {
			t.Errorf("no demo price for %s (have %v)", k, priced)
		}
	}
	// The month-close report prices what the running instance holds: its slice, VM and disk, with
	// no held time left unpriced (revenue 0.00 while instances run would mean the demo's price
	// book misses a key the control plane bills).
	fin, err := sdk.New(api, find(t, text, `finance key:\s+(\S+)`))
	if err != nil {
		t.Fatal(err)
	}
	var held sdk.BillingReportRow
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Second) {
		rep, err := fin.BillingReport(ctx, sdk.BillingReportQuery{GroupBy: []string{"instance_type"}})
		if err != nil {
			t.Fatal(err)
		}
		held = rep.Total
		if held.SliceMiBMs > 0 && held.VMMs > 0 && held.StorageMiBMs > 0 || time.Now().After(deadline) {
			break
		}
	}
	if held.SliceMiBMs == 0 || held.VMMs == 0 || held.StorageMiBMs == 0 || held.UnpricedPieces != 0 {
		t.Fatalf("month-close report of a running shared instance: %+v", held)
	}
	children := descendants(cmd.Process.Pid)
	if len(children) < 2 { // gpuserverd, hostd (PostgreSQL is started by pg_ctl, detached)
		t.Fatalf("stack runs %d child processes, want gpuserverd and hostd", len(children))
	}
	db := find(t, text, `database:\s+postgres://\S+@(127\.0\.0\.1:\d+)/`)

	cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("stack exit: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("stack did not stop in 60 s after SIGINT")
	}
	if conn, err := net.DialTimeout("tcp", db, time.Second); err == nil {
		conn.Close()
		t.Errorf("PostgreSQL still listens on %s after the stack stopped", db)
	}
	for _, pid := range children {
		if syscall.Kill(pid, 0) == nil {
			exe, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
			t.Errorf("process %d (%s) outlived the stack", pid, exe)
		}
	}
}

func find(t *testing.T, text, re string) string {
	t.Helper()
	m := regexp.MustCompile(re).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("banner lacks %s", re)
	}
	return m[1]
}

// descendants lists every process below pid, from /proc.
func descendants(pid int) []int {
	parent := map[int]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) > 1 {
			parent[p], _ = strconv.Atoi(fields[1])
		}
	}
	var out []int
	for p := range parent {
		for q := parent[p]; q > 1; q = parent[q] {
			if q == pid {
				out = append(out, p)
				break
			}
		}
	}
	return out
}
