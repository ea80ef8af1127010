package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"gpucloud/apiserver/app"
	"gpucloud/gpuserverd/backend/sim"
	"gpucloud/hostd/console"
	"gpucloud/hostd/reconcile"
	"gpucloud/hostd/virt"
	"gpucloud/hostd/vmtest"
	"gpucloud/internal/sshtest"
	"gpucloud/sdk"
	"gpucloud/sdk/sdktest"
)

// TestRealVMTenantJourney is issue 16's tenant journey on real VMs: QEMU (TCG: nested KVM hangs on
// the CI machines) through libvirt, booted from the image deploy/guest-image/build-mini.sh builds
// with gpucloud's guest library, runtime and loader in it, driven only through the apiserver.
// A tenant creates a VM with an SSH key and user-data, logs in with that key through the
// endpoint the API shows (hostd's forward on 127.0.0.1), finds the user-data's effect, runs a
// CUDA program through the guest library against gpuserverd (simulated backend, reached from the
// guest at QEMU's user-mode host address, which is the host's loopback), sees a program whose
// RPATH names a decoy libcudart get gpucloud's runtime (gpucloud-info says so), logs in on the
// serial console through the API's WebSocket (hostd attaching to the domain's console through
// libvirt) and runs a command there, writes a file to
// an attached volume, stops and starts the VM, detaches the volume and reads the file back from
// a second VM. All traffic stays on loopback.
func TestRealVMTenantJourney(t *testing.T) {
	ctx, hv := realLibvirt(t, 12*time.Minute)
	t0 := time.Now()
	at := t0
	st := startVMStack(ctx, t, &at)
	env, bin, extras, typ := st.env, st.bin, st.extras, st.gpuType
	h := startRealHost(ctx, t, env, hv, st.imgDir, nil)
	step(t, &at, "apiserver, gpuserverd (simulated) and hostd on qemu:///system")

	tenant := env.Client(t, env.A.AdminKey)
	key := sshtest.New(t, "alice@laptop")
	k, err := tenant.CreateSSHKey(ctx, sdk.CreateSSHKeyRequest{Name: "laptop", PublicKey: key.Line})
	if err != nil {
		t.Fatal(err)
	}
	vol, err := tenant.CreateVolume(ctx, sdk.CreateVolumeRequest{Name: "data", SizeGiB: 1})
	if err != nil {
		t.Fatal(err)
	}
	created := time.Now()
	vm1, err := tenant.CreateInstance(ctx, sdk.CreateInstanceRequest{Name: "vm1", InstanceTypeID: typ, Image: vmtest.MiniImageName,
		SSHKeyIDs: []string{k.ID}, UserData: "#!/bin/sh\necho \"user-data ran on $(hostname)\" >> /root/user-data-marker\n" +
			// The image's root has no password (SSH keys only): its getty refuses every login. An
			// empty one lets the serial console in (Dropbear still refuses blank passwords).
			"sed -i 's/^root:[^:]*:/root::/' /etc/shadow\n"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { undefine(hv, vm1.ID) })
	if vol, err = tenant.AttachVolume(ctx, vol.ID, vm1.ID); err != nil || vol.Device == "" {
		t.Fatalf("attach: %+v %v", vol, err)
	}
	vm := h.vm(ctx, tenant, vm1.ID, key)
	t.Logf("create -> SSH login through %s: %.1f s", vm.inst.SSH.Command, time.Since(created).Seconds())
	step(t, &at, "vm1 created, booted, tenant logged in over SSH")
	if want := fmt.Sprintf("ssh -p %d root@127.0.0.1", vm.inst.SSH.Port); vm.inst.SSH.Command != want {
		t.Errorf("ssh command %q, want %q", vm.inst.SSH.Command, want)
	}
	if got := vm.run("cat /root/user-data-marker"); got != "user-data ran on vm1" {
		t.Fatalf("user-data's effect: %q", got)
	}
	if got := vm.run("id -u; ls -l /root/.ssh/authorized_keys | cut -c1-10"); got != "0\n-rw-------" {
		t.Fatalf("login as root with a private authorized_keys: %q", got)
	}
	// A key the tenant never gave is refused by the guest's SSH server.
	stranger := sshtest.New(t, "mallory@elsewhere")
	if c, err := ssh.Dial("tcp", net.JoinHostPort(vm.inst.SSH.Host, fmt.Sprint(vm.inst.SSH.Port)), &ssh.ClientConfig{User: "root",
		Auth: []ssh.AuthMethod{ssh.PublicKeys(stranger.Signer)}, HostKeyCallback: ssh.InsecureIgnoreHostKey(), Timeout: 10 * time.Second}); err == nil {
		c.Close()
		t.Fatal("the VM accepted a key the tenant never gave")
	}
	// The serial console's log, as hostd ships it, through the API: the tenant's, no one else's.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		log, err := tenant.InstanceConsole(ctx, vm1.ID)
		if err == nil && strings.Contains(log.Log, "gpucloud-mini: ready") && strings.Contains(log.Log, "vm1 login:") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("console log through the API lacks the boot's lines: %v\n%s", err, log.Log)
		}
	}
	if _, err := env.Client(t, env.B.AdminKey).InstanceConsole(ctx, vm1.ID); !sdk.IsNotFound(err) {
		t.Fatalf("another tenant reading vm1's console log: %v", err)
	}
	// The interactive serial console: log in on ttyS0 and run a command, through the API's
	// WebSocket, hostd's console server and libvirt's console stream.
	serialLogin(ctx, t, tenant, vm1.ID, func() string { return vm.run("grep ^root: /etc/shadow | cut -c1-12; cat /etc/inittab") })
	if _, err := env.Client(t, env.B.AdminKey).OpenConsole(ctx, vm1.ID); !sdk.IsNotFound(err) {
		t.Fatalf("another tenant opening vm1's console: %v", err)
	}
	step(t, &at, "logged in on the serial console through the API's WebSocket")

	// A CUDA program through the guest library: its only configuration is the seed's guest.conf.
	vm.upload(filepath.Join(bin, "golden"), "/root/golden", 0o755)
	if got := vm.run("/root/golden"); !strings.Contains(got, "GOLDEN OK") {
		t.Fatalf("CUDA program in the VM: %q", got)
	}
	// A program whose DT_RPATH names a folder with a decoy libcudart.so.13 (as PyTorch's wheel
	// does) gets gpucloud's through the loader auditor the image names for every login.
	vm.run("mkdir -p " + vmWheelLib)
	vm.upload(extras.decoy, vmWheelLib+"/libcudart.so.13", 0o755)
	vm.upload(extras.probe, "/root/rpath_probe", 0o755)
	if got, want := vm.run("PROBE_DEVICES=1 /root/rpath_probe"), "needed: version 13000 from /usr/lib/gpucloud/libcudart.so.13\ndevices: 1 (rc 0)"; got != want {
		t.Fatalf("rpath_probe in the VM:\n%s\nwant\n%s", got, want)
	}
	if got := vm.run("GPUCLOUD_NATIVE=1 /root/rpath_probe"); !strings.Contains(got, "from "+vmWheelLib+"/libcudart.so.13") {
		t.Fatalf("opted out, rpath_probe should get the decoy: %q", got)
	}
	info := vm.run("gpucloud-info /root/rpath_probe")
	if !strings.Contains(info, "gpucloud  libcudart.so.13") || strings.Contains(info, "OTHER") {
		t.Fatalf("gpucloud-info in the VM:\n%s", info)
	}
	step(t, &at, "CUDA program and RPATH decoy through gpucloud's libraries")

	const data = "written-by-vm1-7d3f"
	dev := "/dev/" + vol.Device
	vm.run(fmt.Sprintf("test -b %[1]s && mke2fs -q %[1]s && mount -t ext2 %[1]s /mnt && echo %[2]s > /mnt/hello.txt && umount /mnt", dev, data))
	hostKey := vm.hostKey
	vm.close()
	step(t, &at, "file written to the attached volume")

	stopInstance(ctx, t, tenant, vm1.ID)
	if _, err := tenant.StartInstance(ctx, vm1.ID); err != nil {
		t.Fatal(err)
	}
	vm = h.vm(ctx, tenant, vm1.ID, key)
	if got := vm.run(fmt.Sprintf("mount -t ext2 %s /mnt && cat /mnt/hello.txt; umount /mnt", dev)); got != data {
		t.Fatalf("after stop and start the volume holds %q, want %q", got, data)
	}
	// The root disk survived too: the same host key, and the user-data ran once per instance.
	if string(vm.hostKey.Marshal()) != string(hostKey.Marshal()) {
		t.Error("the VM's SSH host key changed across stop and start")
	}
	if got := vm.run("cat /root/user-data-marker"); got != "user-data ran on vm1" {
		t.Errorf("user-data after a restart: %q (it runs once per instance)", got)
	}
	vm.close()
	step(t, &at, "vm1 stopped and started; volume and root disk kept")

	// Detached from vm1 (stopped: this image has no hot-unplug handshake to wait for) and attached
	// to a second VM, which reads the file back.
	stopInstance(ctx, t, tenant, vm1.ID)
	if vol, err = tenant.DetachVolume(ctx, vol.ID); err != nil || vol.State != "available" {
		t.Fatalf("detach: %+v %v", vol, err)
	}
	// Deleting vm1 gives its GPU share to vm2 (the simulated server has one GPU) and must leave
	// the detached volume as it is.
	if _, err := tenant.DeleteInstance(ctx, vm1.ID); err != nil {
		t.Fatal(err)
	}
	waitState(ctx, t, tenant, vm1.ID, sdk.StateDeleted)
	vm2, err := tenant.CreateInstance(ctx, sdk.CreateInstanceRequest{Name: "vm2", InstanceTypeID: typ, Image: vmtest.MiniImageName, SSHKeyIDs: []string{k.ID}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { undefine(hv, vm2.ID) })
	if vol, err = tenant.AttachVolume(ctx, vol.ID, vm2.ID); err != nil {
		t.Fatal(err)
	}
	vm = h.vm(ctx, tenant, vm2.ID, key)
	if got := vm.run(fmt.Sprintf("mount -t ext2 /dev/%s /mnt && cat /mnt/hello.txt; umount /mnt", vol.Device)); got != data {
		t.Fatalf("vm2 reads %q from the volume, want %q", got, data)
	}
	if got := vm.run("test -e /root/user-data-marker && echo present || echo absent"); got != "absent" {
		t.Errorf("vm2 has vm1's user-data marker: %q", got)
	}
	vm.close()
	step(t, &at, "volume detached, vm1 deleted, volume attached to vm2, file read back")

	if _, err := tenant.DeleteInstance(ctx, vm2.ID); err != nil {
		t.Fatal(err)
	}
	waitState(ctx, t, tenant, vm2.ID, sdk.StateDeleted)
	if err := tenant.DeleteVolume(ctx, vol.ID); err != nil {
		t.Fatal(err)
	}
	step(t, &at, "vm2 and the volume deleted")
	t.Logf("real-VM tenant journey total %.1f s", time.Since(t0).Seconds())
}

// vmStack is what the real-VM tests share: the guest binaries, the mini image, the apiserver
// with that image registered, a gpuserverd on the simulated backend (advertised at 10.0.2.2, which
// QEMU's user-mode network maps to the host's loopback, where it listens) and a shared GPU type.
type vmStack struct {
	env     *sdktest.Env
	bin     string
	extras  vmExtras
	imgDir  string
	gs      *gpuserverd
	gpuType string
}

func startVMStack(ctx context.Context, t *testing.T, at *time.Time) *vmStack {
	t.Helper()
	st := &vmStack{bin: buildGolden(t)}
	st.extras = buildVMExtras(t, st.bin)
	repo, _ := filepath.Abs("../..")
	cache := os.Getenv("GPUCLOUD_GUEST_IMAGE_CACHE") // CI may keep it outside the checkout
	if cache == "" {
		cache = filepath.Join(repo, ".data", "guest-image")
	}
	var err error
	bin := st.bin
	st.imgDir, err = vmtest.MiniImage(ctx, repo, cache,
		vmtest.MiniLibs{Cuda: filepath.Join(bin, "libcuda.so.1"), Cudart: filepath.Join(bin, "libcudart.so.13"), Audit: filepath.Join(bin, "libgpucloud-audit.so")})
	if err != nil {
		t.Fatal(err)
	}
	step(t, at, "guest library, runtime, loader; the mini image (kept while its inputs are)")

	env := sdktest.New(t)
	st.env = env
	gsReg, err := env.OperatorClient.CreateGPUServer(ctx, "gs-vm")
	if err != nil {
		t.Fatal(err)
	}
	// The guest reaches 10.0.2.2, which QEMU's user-mode network maps to the host's loopback.
	gsListen := freeAddr(t)
	_, gsPort, _ := net.SplitHostPort(gsListen)
	st.gs = startGPUServerd(t, bin, env.URL, gsReg.Credential, t.TempDir(), gsListen, sim.Kind, "--advertise", "10.0.2.2:"+gsPort)
	srv, err := env.OperatorClient.GetGPUServer(ctx, gsReg.ID)
	if err != nil || len(srv.GPUs) == 0 {
		t.Fatalf("GPU server after join: %+v %v", srv, err)
	}
	m, err := env.OperatorClient.CreateGPUModel(ctx, sdk.CreateGPUModelRequest{Name: srv.GPUs[0].Name, MemoryBytes: srv.GPUs[0].MemoryBytes, NVMLMatch: srv.GPUs[0].Name})
	modelID := srv.GPUs[0].GPUModelID
	if modelID == "" {
		if err != nil {
			t.Fatal(err)
		}
		modelID = m.ID
	}
	st.gpuType = sharedType(t, env, "vm-shared", modelID)
	if _, err := app.EnsureImage(ctx, env.Store, vmtest.MiniImageName, filepath.Join(st.imgDir, vmtest.MiniImageName+".qcow2"), 1, true); err != nil {
		t.Fatal(err)
	}
	return st
}

const vmWheelLib = "/opt/wheel/nvidia/cu13/lib"

type vmExtras struct{ decoy, probe string }

// buildVMExtras adds to bin what the VM part needs besides the guest library: gpucloud's runtime
// (built against the test shim's headers, as the guest tests build it: CI has no CUDA toolkit),
// the loader auditor, and the RPATH probe with its decoy runtime.
func buildVMExtras(t *testing.T, bin string) vmExtras {
	t.Helper()
	g := "../../gpuserverd/guest"
	x := vmExtras{decoy: filepath.Join(bin, "decoy", "libcudart.so.13"), probe: filepath.Join(bin, "rpath_probe")}
	os.MkdirAll(filepath.Dir(x.decoy), 0o755)
	for _, s := range [][]string{
		{"make", "-s", "-C", g + "/cudart", "BUILD=" + bin, "INC=-Itestshim -I../include", "LIBDIRS=-L" + bin,
			"CFLAGS=-O2 -Wall -Wextra -Werror"},
		{"make", "-s", "-C", g + "/loader", "BUILD=" + bin, "WERROR=-Werror"},
		{"gcc", "-Wall", "-Werror", "-fPIC", "-shared", "-Wl,-soname,libcudart.so.13", "-o", x.decoy, g + "/loader/testdata/decoy_cudart.c"},
		{"gcc", "-Wall", "-Werror", "-Wl,--disable-new-dtags,-rpath," + vmWheelLib, "-o", x.probe, g + "/loader/testdata/rpath_probe.c", x.decoy, "-ldl"},
	} {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", s, err, out)
		}
	}
	return x
}

// realLibvirt is a qemu:///system connection on a running libvirtd, or a skip that says which
// part is missing. Without root no libvirtd can be started and no QEMU run as the test needs.
func realLibvirt(t *testing.T, limit time.Duration) (context.Context, *virt.Hypervisor) {
	t.Helper()
	if os.Geteuid() != 0 {
		realVMSkip(t, "needs root (it starts libvirtd and runs QEMU through qemu:///system)")
	}
	for _, tool := range []string{"qemu-system-x86_64", "libvirtd", "apt-get", "dpkg-deb", "mke2fs", "qemu-img"} {
		if _, err := exec.LookPath(tool); err != nil {
			realVMSkip(t, tool+" not installed (scripts/install-deps.sh installs it)")
		}
	}
	vmtest.LockSystemLibvirt(t) // before the clock starts: another package's real-VM test may hold it
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	t.Cleanup(cancel)
	if err := vmtest.EnsureLibvirtd(ctx); err != nil {
		t.Fatal(err)
	}
	hv, err := virt.Open("qemu:///system", "qemu")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hv.Close() })
	return ctx, hv
}

// realVMSkip skips a real-VM test that cannot run here, saying why. A skip is silent in a plain
// `go test ./...`: CI (.ci/run) sets GPUCLOUD_REQUIRE_REAL_VM=1, which makes it a failure instead.
func realVMSkip(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("GPUCLOUD_REQUIRE_REAL_VM") == "1" {
		t.Fatalf("real-VM test cannot run: %s (GPUCLOUD_REQUIRE_REAL_VM=1 requires it)", why)
	}
	t.Skipf("real-VM test skipped: %s", why)
}

// realHost is hostd on qemu:///system, registered through the API and running its loop.
type realHost struct {
	t           *testing.T
	id          string
	r           *reconcile.Reconciler
	data        string
	consoleAddr string // hostd's interactive console listener (127.0.0.1)
}

// tweak, when not nil, changes hostd's configuration before it starts.
func startRealHost(ctx context.Context, t *testing.T, env *sdktest.Env, hv *virt.Hypervisor, imgDir string, tweak func(*reconcile.Config)) *realHost {
	t.Helper()
	_, cp := registerHost(t, env, "node-vm")
	dir := t.TempDir()
	// Where qemu.conf runs QEMU as libvirt-qemu, it must be able to walk to the VM's files.
	os.Chmod(dir, 0o711)
	os.Chmod(filepath.Dir(dir), 0o711)
	// hostd fetches the qcow2 from the registered source; the kernel, initramfs and command line
	// sit beside it as build-mini.sh wrote them.
	images := filepath.Join(dir, "images")
	os.MkdirAll(images, 0o755)
	for _, ext := range []string{"vmlinuz", "initrd", "cmdline"} {
		f := vmtest.MiniImageName + "." + ext
		b, err := os.ReadFile(filepath.Join(imgDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(images, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pool := fmt.Sprintf("gpucloud-e2e-%d", time.Now().UnixNano()%1e9)
	t.Cleanup(func() { hv.RemovePool(pool) })
	first := freePortRange(t, 4)
	h := &realHost{t: t, data: filepath.Join(dir, "data")}
	consoleLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.consoleAddr = consoleLn.Addr().String()
	cfg := reconcile.Config{ControlPlane: cp, Hypervisor: hv, DataDir: h.data, ImagesDir: images,
		ConsoleURL: "ws://" + h.consoleAddr,
		Network:    virt.Network{Kind: "user", ForwardBind: "127.0.0.1"}, Hostname: "node-vm",
		Ports: reconcile.PortRange{First: first, Last: first + 3}, PublicHost: "127.0.0.1",
		VolumePool: pool, VolumeDir: filepath.Join(dir, "volumes"), Version: "e2e", StopGrace: 2 * time.Second,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if tweak != nil {
		tweak(&cfg)
	}
	h.r, err = reconcile.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.r.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	h.id = h.r.HostID()
	runCtx, stop := context.WithCancel(ctx)
	// hostd's console server, as cmd/hostd runs it: grants checked against the heartbeat's key,
	// the domain's serial console opened through libvirt.
	cs := &console.Server{Auth: h.r.ConsoleAuth, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Open: func(id string) (io.ReadWriteCloser, error) { return hv.OpenConsole(virt.DomainName(id)) }}
	consoleSrv := &http.Server{Handler: cs.Handler(runCtx)}
	go consoleSrv.Serve(consoleLn)
	t.Cleanup(func() { consoleSrv.Close() })
	done := make(chan struct{})
	go func() { defer close(done); h.r.Run(runCtx, 500*time.Millisecond, nil) }()
	t.Cleanup(func() { stop(); <-done })
	return h
}

// freePortRange is the first of n consecutive loopback ports nothing listens on now.
func freePortRange(t *testing.T, n int) int {
	t.Helper()
	for base := 31000 + int(time.Now().UnixNano()%2000)*8; base < 60000; base += n {
		ok := true
		for p := base; p < base+n && ok; p++ {
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			if ok = err == nil; ok {
				ln.Close()
			}
		}
		if ok {
			return base
		}
	}
	t.Fatal("no free loopback port range")
	return 0
}

// sshVM is an SSH session to a VM, through the endpoint the API shows.
type sshVM struct {
	t       *testing.T
	inst    sdk.Instance
	client  *ssh.Client
	hostKey ssh.PublicKey
}

// vm waits for the instance to run and logs in over SSH with key, retrying while it boots; on
// failure it shows the VM's console log as the API serves it.
func (h *realHost) vm(ctx context.Context, c *sdk.Client, id string, key sshtest.Key) *sshVM {
	h.t.Helper()
	inst := waitState(ctx, h.t, c, id, sdk.StateRunning)
	for inst.SSH == nil {
		time.Sleep(200 * time.Millisecond)
		inst = waitState(ctx, h.t, c, id, sdk.StateRunning)
	}
	v := &sshVM{t: h.t, inst: inst}
	cfg := &ssh.ClientConfig{User: inst.SSH.User, Auth: []ssh.AuthMethod{ssh.PublicKeys(key.Signer)}, Timeout: 10 * time.Second,
		HostKeyCallback: func(_ string, _ net.Addr, k ssh.PublicKey) error { v.hostKey = k; return nil }}
	addr := net.JoinHostPort(inst.SSH.Host, fmt.Sprint(inst.SSH.Port))
	// A boot takes seconds on an idle machine and about a minute on a loaded 2-core one.
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	for {
		client, err := ssh.Dial("tcp", addr, cfg)
		if err == nil {
			v.client = client
			return v
		}
		select {
		case <-ctx.Done():
			log, _ := c.InstanceConsole(context.Background(), id)
			h.t.Fatalf("no SSH login to %s through %s: %v\nconsole log (API):\n%s", id, addr, err, log.Log)
		case <-time.After(time.Second):
		}
	}
}

// run runs cmd in the VM and returns its trimmed output (stdout and stderr); a failure fails the test.
func (v *sshVM) run(cmd string) string {
	v.t.Helper()
	out, err := v.exec(cmd, nil)
	if err != nil {
		v.t.Fatalf("in %s: %q: %v\n%s", v.inst.Name, cmd, err, out)
	}
	return out
}

func (v *sshVM) exec(cmd string, stdin io.Reader) (string, error) {
	sess, err := v.client.NewSession()
	if err != nil {
		return "", err
	}
	defer sess.Close()
	sess.Stdin = stdin
	out, err := sess.CombinedOutput(cmd)
	return strings.TrimSpace(string(out)), err
}

// upload copies a local file into the VM over the session (cat, as a tenant without scp would).
func (v *sshVM) upload(local, remote string, mode os.FileMode) {
	v.t.Helper()
	f, err := os.Open(local)
	if err != nil {
		v.t.Fatal(err)
	}
	defer f.Close()
	if out, err := v.exec(fmt.Sprintf("cat > %s && chmod %o %s", remote, mode, remote), f); err != nil {
		v.t.Fatalf("upload %s to %s: %v %s", local, remote, err, out)
	}
}

func (v *sshVM) close() { v.client.Close() }

// waitState polls the instance until it is in state.
func waitState(ctx context.Context, t *testing.T, c *sdk.Client, id, state string) sdk.Instance {
	t.Helper()
	inst, err := c.WaitInstance(ctx, id, 200*time.Millisecond, nil, state)
	if err != nil {
		log, _ := c.InstanceConsole(context.Background(), id)
		t.Fatalf("instance %s never %s: %+v %v\nconsole log (API):\n%s", id, state, inst, err, log.Log)
	}
	return inst
}

func stopInstance(ctx context.Context, t *testing.T, c *sdk.Client, id string) {
	t.Helper()
	if _, err := c.StopInstance(ctx, id); err != nil {
		t.Fatal(err)
	}
	waitState(ctx, t, c, id, sdk.StateStopped)
}

// undefine removes the instance's domain if a failed test left it.
func undefine(hv *virt.Hypervisor, id string) { hv.Undefine(virt.DomainName(id)) }

// serialLogin opens the instance's interactive console through the API, logs in as root on the
// guest's getty and runs a command whose answer only the guest's shell can give.
// diag, on failure, says what the guest has (through SSH).
func serialLogin(ctx context.Context, t *testing.T, c *sdk.Client, id string, diag func() string) {
	t.Helper()
	con, err := c.OpenConsole(ctx, id)
	if err != nil {
		t.Fatalf("open the serial console: %v", err)
	}
	defer con.Close()
	var (
		mu  sync.Mutex
		out strings.Builder
	)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := con.Read(buf)
			mu.Lock()
			out.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	// expect writes send (again every 10 s when resend: TCG is slow) until the console's output
	// since the last expect shows want.
	seen := 0
	expect := func(send string, resend bool, want string) {
		t.Helper()
		con.Write([]byte(send))
		for deadline, next := time.Now().Add(60*time.Second), time.Now().Add(10*time.Second); ; time.Sleep(200 * time.Millisecond) {
			mu.Lock()
			got := out.String()
			mu.Unlock()
			if i := strings.Index(got[seen:], want); i >= 0 {
				seen += i + len(want)
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("serial console: no %q after sending %q; the console showed:\n%s\nthe guest (SSH):\n%s", want, send, got, diag())
			}
			if resend && time.Now().After(next) {
				con.Write([]byte(send))
				next = time.Now().Add(10 * time.Second)
			}
		}
	}
	expect("\r", true, "login:") // getty prints its prompt again for an empty line
	expect("root\r", false, "#") // no password asked: root's is empty (user-data)
	expect("echo serial-$((6*7))-$(id -u)\r", true, "serial-42-0")
}
