package e2e

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"gpucloud/hostd/reconcile"
	"gpucloud/hostd/tenantfw"
	"gpucloud/hostd/virt"
	"gpucloud/hostd/vmtest"
	"gpucloud/internal/sshtest"
	"gpucloud/sdk"
)

// TestRealVMNetworkIsolation is issue 16's "two tenants' VMs cannot reach each other; a VM cannot
// reach the apiserver's or gpuserverd's admin ports" on real QEMU guests, booted through libvirt
// by hostd as a host renting VMs with user-mode networking runs it: QEMU as a user of its own
// (hostd's -qemu-user, here libvirt-qemu, which hostd puts into each domain's DAC label whatever
// qemu.conf says) and hostd's nftables table, whose output chain lets that user's sockets (every
// connection a guest opens is one of QEMU's sockets on the host) open nothing on the host's own
// addresses but the GPU servers' data ports. Tenant A's GPU VM and tenant B's VM probe, with a
// real TCP connection each, every service the test runs on the host's loopback (which the guests
// see at 10.0.2.2): A reaches gpuserverd's data port (first: the probe can succeed, so a refusal
// means something) and runs a CUDA program through it; neither reaches the other's forwarded SSH
// port, the apiserver, gpuserverd's admin port or hostd's console listener, all of which answer
// the host itself. The VMs have no addresses of each other's to try: each has its own user-mode
// network (10.0.2.15 is every guest itself). All traffic stays on loopback; the nftables table is
// in this machine's namespace (QEMU's sockets are there) and matches only libvirt-qemu's sockets.
func TestRealVMNetworkIsolation(t *testing.T) {
	ctx, hv := realLibvirt(t, 12*time.Minute)
	uid, gid := qemuUser(t)
	fw := claimHostFirewall(ctx, t)
	t0 := time.Now()
	at := t0
	st := startVMStack(ctx, t, &at)
	env := st.env
	h := startRealHost(ctx, t, env, hv, st.imgDir, func(c *reconcile.Config) {
		c.QEMUUID, c.QEMUGID, c.Firewall = uid, gid, fw
	})
	probe := filepath.Join(st.bin, "tcpprobe")
	if out, err := exec.Command("gcc", "-O2", "-Wall", "-Wextra", "-Werror", "-static", "-o", probe, "testdata/tcpprobe.c").CombinedOutput(); err != nil {
		t.Fatalf("build tcpprobe: %v\n%s", err, out)
	}
	cpu := cpuType(t, env, "vm-cpu", 1)
	step(t, &at, "apiserver, gpuserverd (simulated) and hostd (QEMU as libvirt-qemu, its sockets filtered)")

	alice, bob := env.Client(t, env.A.AdminKey), env.Client(t, env.B.AdminKey)
	keyA, keyB := sshtest.New(t, "alice@laptop"), sshtest.New(t, "bob@laptop")
	// Both created before either is waited for: the two boots overlap.
	a, err := alice.CreateInstance(ctx, sdk.CreateInstanceRequest{Name: "vm-a", InstanceTypeID: st.gpuType, Image: vmtest.MiniImageName, SSHKey: keyA.Line})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { undefine(hv, a.ID) })
	b, err := bob.CreateInstance(ctx, sdk.CreateInstanceRequest{Name: "vm-b", InstanceTypeID: cpu, Image: vmtest.MiniImageName, SSHKey: keyB.Line})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { undefine(hv, b.ID) })
	vmA, vmB := h.vm(ctx, alice, a.ID, keyA), h.vm(ctx, bob, b.ID, keyB)
	defer vmA.close()
	defer vmB.close()
	step(t, &at, "tenant A's GPU VM and tenant B's VM booted, each tenant logged in over SSH")

	// The filter holds because QEMU really runs as the user its rules name.
	for _, id := range []string{a.ID, b.ID} {
		if got := qemuProcessUID(t, id); got != uid {
			t.Fatalf("QEMU of %s runs as uid %d, want %d (libvirt-qemu)", id, got, uid)
		}
	}
	listing, err := fw.Listing(ctx)
	if err != nil || !strings.Contains(listing, fmt.Sprintf("meta skuid != %d accept", uid)) || !strings.Contains(listing, "ip daddr 127.0.0.1 tcp dport "+port(t, st.gs.endpoint)+" accept") {
		t.Fatalf("hostd's table lacks QEMU's filter or the data port: %v\n%s", err, listing)
	}

	apiHost, _ := url.Parse(env.URL)
	services := map[string]string{ // what, host address: each answers the host itself
		"gpuserverd data port":  st.gs.endpoint,
		"apiserver":             apiHost.Host,
		"gpuserverd admin port": st.gs.admin,
		"hostd console port":    h.consoleAddr,
		"vm-a's SSH forward":    net.JoinHostPort(vmA.inst.SSH.Host, strconv.Itoa(vmA.inst.SSH.Port)),
		"vm-b's SSH forward":    net.JoinHostPort(vmB.inst.SSH.Host, strconv.Itoa(vmB.inst.SSH.Port)),
	}
	for what, addr := range services {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("%s (%s) does not answer the host itself, so a guest's refusal would prove nothing: %v", what, addr, err)
		}
		c.Close()
	}
	vmA.upload(probe, "/root/tcpprobe", 0o755)
	vmB.upload(probe, "/root/tcpprobe", 0o755)
	got := guestProbe(t, vmA, services, "gpuserverd data port", "vm-b's SSH forward", "apiserver", "gpuserverd admin port", "hostd console port")
	if got["gpuserverd data port"] != "open" {
		t.Fatalf("vm-a cannot reach its GPU server's data port (%s), so the probes below would mean nothing: %v", got["gpuserverd data port"], got)
	}
	for what, r := range got {
		if what != "gpuserverd data port" && r == "open" {
			t.Errorf("vm-a (tenant A) reached the %s", what)
		}
	}
	got = guestProbe(t, vmB, services, "vm-a's SSH forward", "apiserver", "gpuserverd admin port", "hostd console port")
	for what, r := range got {
		if r == "open" {
			t.Errorf("vm-b (tenant B) reached the %s", what)
		}
	}
	step(t, &at, "probes from both VMs: data port open; the other tenant's VM, apiserver, admin and hostd ports closed")

	// The data path through the filter: a CUDA program through the guest library.
	vmA.upload(filepath.Join(st.bin, "golden"), "/root/golden", 0o755)
	if out := vmA.run("/root/golden"); !strings.Contains(out, "GOLDEN OK") {
		t.Fatalf("CUDA program in vm-a behind the filter: %q", out)
	}
	step(t, &at, "CUDA program in vm-a through the data port")

	for _, d := range []struct {
		c  *sdk.Client
		id string
	}{{alice, a.ID}, {bob, b.ID}} {
		if _, err := d.c.DeleteInstance(ctx, d.id); err != nil {
			t.Fatal(err)
		}
	}
	waitState(ctx, t, alice, a.ID, sdk.StateDeleted)
	waitState(ctx, t, bob, b.ID, sdk.StateDeleted)
	t.Logf("real-VM network isolation total %.1f s", time.Since(t0).Seconds())
}

// guestProbe runs tcpprobe in the VM against the named services, each at 10.0.2.2 (the host's
// loopback as the guest sees it) and its host port, and returns each one's outcome: open,
// refused, timeout or an error.
func guestProbe(t *testing.T, vm *sshVM, services map[string]string, names ...string) map[string]string {
	t.Helper()
	byTarget := map[string]string{}
	cmd := "/root/tcpprobe 5"
	for _, what := range names {
		target := "10.0.2.2:" + port(t, services[what])
		byTarget[target] = what
		cmd += " " + target
	}
	out := vm.run(cmd)
	got := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		target, result, _ := strings.Cut(line, " ")
		if what, ok := byTarget[target]; ok {
			got[what] = result
		}
	}
	if len(got) != len(names) {
		t.Fatalf("tcpprobe in %s answered %q for %v", vm.inst.Name, out, names)
	}
	t.Logf("from %s: %v", vm.inst.Name, got)
	return got
}

func port(t *testing.T, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	return p
}

// qemuUser is libvirt-qemu's uid and gid (vmtest.EnsureLibvirtd makes the user where it is missing).
func qemuUser(t *testing.T) (uid, gid uint32) {
	t.Helper()
	u, err := user.Lookup("libvirt-qemu")
	if err != nil {
		t.Fatalf("QEMU's user: %v", err)
	}
	id, err1 := strconv.ParseUint(u.Uid, 10, 32)
	group, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil || id == 0 || group == 0 {
		t.Fatalf("libvirt-qemu is %s:%s: want a user and group other than root", u.Uid, u.Gid)
	}
	return uint32(id), uint32(group)
}

// claimHostFirewall is hostd's nftables table in this machine's own namespace, where QEMU's
// sockets are. A table already there belongs to another hostd: the test stops rather than take
// it. The table goes when the test ends (after hostd's loop, which would make it again).
func claimHostFirewall(ctx context.Context, t *testing.T) *tenantfw.Firewall {
	t.Helper()
	if _, err := exec.LookPath("nft"); err != nil {
		realVMSkip(t, "nft not installed (scripts/install-deps.sh installs nftables)")
	}
	fw := &tenantfw.Firewall{}
	if l, err := fw.Listing(ctx); err != nil || l != "" {
		t.Fatalf("table inet %s already exists here (another hostd's?), or nft fails: %v\n%s", tenantfw.Table, err, l)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("nft", "delete", "table", "inet", tenantfw.Table).CombinedOutput(); err != nil {
			t.Errorf("remove the test's nftables table: %v %s", err, out)
		}
	})
	return fw
}

// qemuProcessUID is the uid the QEMU process of the instance's domain runs as (libvirt's pid file).
func qemuProcessUID(t *testing.T, id string) uint32 {
	t.Helper()
	b, err := os.ReadFile("/run/libvirt/qemu/" + virt.DomainName(id) + ".pid")
	if err != nil {
		t.Fatalf("QEMU's pid file: %v", err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/"+strings.TrimSpace(string(b)), &st); err != nil {
		t.Fatalf("QEMU's process: %v", err)
	}
	return st.Uid
}
