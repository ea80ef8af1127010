package e2e

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gpucloud/api"
	"gpucloud/apiserver/app"
	"gpucloud/apiserver/server"
	"gpucloud/hostd/controlplane"
	"gpucloud/hostd/virt"
	"gpucloud/sdk"
	"gpucloud/sdk/sdktest"
)

// TestHostDrainMovesVMs drains a host through the API with two hostds on their own test-driver
// connections: every VM (running, stopped, with a GPU, with a volume) is stopped on the source,
// its disks copied to the target by the target's hostd, and started there with the same id; the
// progress is visible in the API; the source ends empty; the tenant sees no stop and billing
// neither a gap nor a second interval; an apiserver restarted mid-drain resumes it.
func TestHostDrainMovesVMs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env := sdktest.New(t)
	var api1 switchable
	api1.set(t, env.URL)
	front := httptest.NewServer(&api1)
	defer front.Close()

	imgDir := registerBase(t, env)
	gsID, _ := env.GPUServer(t, "gs-move", 1)
	src := startMoveHost(t, env, front.URL, "node-a", 8)
	dst := startMoveHost(t, env, front.URL, "node-b", 8)
	op := env.OperatorClient
	tenant := env.Client(t, env.A.AdminKey)
	if _, err := op.CordonHost(ctx, dst.id); err != nil { // the VMs start on node-a
		t.Fatal(err)
	}
	small := cpuType(t, env, "cpu-move", 2)
	gpu := sharedType(t, env, "shared-move", env.ModelID)
	var ids []string
	for _, c := range []struct{ name, typ string }{{"vm-plain", small}, {"vm-gpu", gpu}, {"vm-stopped", small}} {
		inst, err := tenant.CreateInstance(ctx, sdk.CreateInstanceRequest{Name: c.name, InstanceTypeID: c.typ, Image: "base"})
		if err != nil || inst.HostID != src.id {
			t.Fatalf("create %s: %+v %v", c.name, inst, err)
		}
		ids = append(ids, inst.ID)
	}
	plain, withGPU, stopped := ids[0], ids[1], ids[2]
	for _, id := range ids {
		src.converge(tenant, id, sdk.StateRunning)
	}
	if _, err := tenant.StopInstance(ctx, stopped); err != nil {
		t.Fatal(err)
	}
	src.converge(tenant, stopped, sdk.StateStopped)
	vol, err := tenant.CreateVolume(ctx, sdk.CreateVolumeRequest{Name: "data", SizeGiB: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tenant.AttachVolume(ctx, vol.ID, plain); err != nil {
		t.Fatal(err)
	}
	pass(t, src)
	// The tenant's data: a pattern in the root disk and in the volume. libvirt's test driver keeps
	// volumes in memory only, so the test makes the file a real pool would hold.
	srcDisk := filepath.Join(src.data, "instances", plain, "disk.qcow2")
	qemuIO(t, srcDisk, "write -P 0xab 0 64k")
	srcVol := filepath.Join(src.data, "volumes", virt.VolumeName(vol.ID))
	if err := os.MkdirAll(filepath.Dir(srcVol), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", srcVol, "1G").CombinedOutput(); err != nil {
		t.Fatalf("volume file: %v %s", err, out)
	}
	qemuIO(t, srcVol, "write -P 0xcd 4096 8k")
	before, err := tenant.GetInstance(ctx, plain)
	if err != nil || before.SSH == nil || !strings.Contains(before.SSH.Command, "node-a.example") {
		t.Fatalf("before the move: %+v %v", before.SSH, err)
	}
	billedBefore := vmAllocations(t, env, plain, "vm")
	if len(billedBefore) != 1 || !strings.HasSuffix(billedBefore[0], "-open") {
		t.Fatalf("vm allocations before the move: %v", billedBefore)
	}
	held := map[string][]string{} // the GPU VM's every allocation: GPU slice, VM, root disk
	for _, kind := range []string{"gpu", "vm", "storage"} {
		if held[kind] = vmAllocations(t, env, withGPU, kind); len(held[kind]) != 1 {
			t.Fatalf("%s allocations of the GPU VM before the move: %v", kind, held[kind])
		}
	}
	if _, err := op.UncordonHost(ctx, dst.id); err != nil {
		t.Fatal(err)
	}

	// The plan: a move per VM, each to node-b, reserved at once.
	d, err := op.StartMoveDrainHost(ctx, src.id, sdk.HostDrainOptions{})
	if err != nil || d.Counts["pending"] != 3 || d.Remaining != 3 || !d.Draining {
		t.Fatalf("plan %+v %v", d, err)
	}
	for _, m := range d.Moves {
		if m.TargetID != dst.id || m.Mode != "restart" {
			t.Fatalf("move %+v", m)
		}
	}
	if h, _ := op.GetHost(ctx, dst.id); h.UsedVCPUs != 2+2+1 {
		t.Fatalf("target room reserved: %d vcpus, want 5", h.UsedVCPUs)
	}
	// The source stops the VMs and offers their disks: the moves are copying, with their size.
	pass(t, src)
	d, err = op.GetHostDrain(ctx, src.id)
	if err != nil || d.Counts["copying"] != 3 {
		t.Fatalf("after the source's pass: %+v %v", d, err)
	}
	for _, m := range d.Moves {
		if m.BytesTotal == 0 {
			t.Fatalf("move %s of %s offers 0 bytes", m.ID, m.InstanceName)
		}
	}
	if doms, _ := src.hv.List(); len(doms) != 3 || doms[0].State != virt.Stopped || doms[1].State != virt.Stopped {
		t.Fatalf("source domains %+v", doms)
	}
	if inst, _ := tenant.GetInstance(ctx, plain); inst.State != sdk.StateRunning {
		t.Fatalf("the tenant sees %s during the move; a move is not a stop", inst.State)
	}

	// The apiserver restarts mid-drain: a fresh one on the same database carries on.
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	srvCtx, stopSrv := context.WithCancel(ctx)
	defer stopSrv()
	restarted, err := app.NewServer(srvCtx, server.Options{Store: env.Store, TokenKey: key})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(restarted.Handler())
	defer hs.Close()
	api1.set(t, hs.URL)
	if op, err = sdk.New(hs.URL, env.Operator, sdk.Options{}); err != nil {
		t.Fatal(err)
	}
	if tenant, err = sdk.New(hs.URL, env.A.AdminKey, sdk.Options{}); err != nil {
		t.Fatal(err)
	}

	// The target pulls the disks, defines and starts the VMs, and says done.
	pass(t, dst)
	d, err = op.GetHostDrain(ctx, src.id)
	if err != nil || d.Counts["done"] != 3 || d.Remaining != 0 || d.Open() != 0 {
		t.Fatalf("after the target's pass: %+v %v", d, err)
	}
	for _, m := range d.Moves {
		if m.BytesCopied != m.BytesTotal || m.FinishedAt == nil {
			t.Fatalf("done move %+v", m)
		}
	}
	// The source removes what it held: domains, files, the volume.
	pass(t, src)
	if doms, _ := src.hv.List(); len(doms) != 0 {
		t.Fatalf("the source still has %d domains", len(doms))
	}
	if left, _ := os.ReadDir(filepath.Join(src.data, "instances")); len(left) != 0 {
		t.Fatalf("the source keeps instance files: %v", left)
	}
	if vols, _ := src.hv.Volumes("vols-node-a"); len(vols) != 0 {
		t.Fatalf("the source keeps volumes %v", vols)
	}
	hA, _ := op.GetHost(ctx, src.id)
	hB, _ := op.GetHost(ctx, dst.id)
	if hA.UsedVCPUs != 0 || hB.UsedVCPUs != 5 {
		t.Fatalf("room: source %d vcpus used, target %d (want 0 and 5)", hA.UsedVCPUs, hB.UsedVCPUs)
	}

	// Same instances, on the target, as the tenant wanted them.
	doms, _ := dst.hv.List()
	states := map[string]virt.State{}
	for _, dm := range doms {
		states[dm.Meta.InstanceID] = dm.State
	}
	for id, want := range map[string]string{plain: sdk.StateRunning, withGPU: sdk.StateRunning, stopped: sdk.StateStopped} {
		inst, err := tenant.GetInstance(ctx, id)
		if err != nil || inst.HostID != dst.id || inst.State != want {
			t.Fatalf("%s after the move: host %s state %s (%v)", id, inst.HostID, inst.State, err)
		}
		wantDom := virt.Running
		if want == sdk.StateStopped {
			wantDom = virt.Stopped
		}
		if st, ok := states[id]; !ok || st != wantDom {
			t.Fatalf("%s on the target: domain %v (%v)", id, st, ok)
		}
	}
	after, _ := tenant.GetInstance(ctx, plain)
	if after.SSH == nil || !strings.Contains(after.SSH.Command, "node-b.example") {
		t.Fatalf("ssh endpoint after the move: %+v", after.SSH)
	}
	if got := history(t, tenant, plain); got != "pending,provisioning,running" {
		t.Fatalf("states %q: the move showed the tenant a stop", got)
	}
	if v, _ := tenant.GetVolume(ctx, vol.ID); v.HostID != dst.id || v.InstanceID != plain {
		t.Fatalf("volume after the move: %+v", v)
	}
	// The data came along, and the disk now sits on the target's own copy of the base image.
	dstDisk := filepath.Join(dst.data, "instances", plain, "disk.qcow2")
	qemuIO(t, dstDisk, "read -P 0xab 0 64k")
	qemuIO(t, filepath.Join(dst.data, "volumes", virt.VolumeName(vol.ID)), "read -P 0xcd 4096 8k")
	info, err := exec.Command("qemu-img", "info", "-U", dstDisk).Output()
	if err != nil || !strings.Contains(string(info), filepath.Join(dst.data, "..", "images")) && !strings.Contains(string(info), "images/base") {
		t.Fatalf("target disk: %v %s", err, info)
	}
	if strings.Contains(string(info), imgDir) {
		t.Fatalf("the target's disk still backs onto the registry's file: %s", info)
	}
	// The GPU VM's seed on the target still names its GPU server.
	if conf := seedFile(t, dst, withGPU, "/gpucloud/guest.conf"); !strings.Contains(conf, "GPUCLOUD_ENDPOINT=gs-move:7000\n") {
		t.Fatalf("guest.conf on the target:\n%s", conf)
	}
	if g, _ := op.GetGPUServer(ctx, gsID); g.GPUs[0].ReservedBytes == 0 {
		t.Fatal("the GPU VM's reservation was lost in the move")
	}
	// Billing: the same open interval before and after; no stop, no second start.
	if got := vmAllocations(t, env, plain, "vm"); len(got) != 1 || got[0] != billedBefore[0] {
		t.Fatalf("vm allocations after the move %v, before %v", got, billedBefore)
	}
	for kind, before := range held {
		if got := vmAllocations(t, env, withGPU, kind); len(got) != 1 || got[0] != before[0] {
			t.Fatalf("the GPU VM's %s allocations after the move %v, before %v", kind, got, before)
		}
	}
	// A later pass on the target reports the instance as its own: nothing changes.
	pass(t, dst, src)
	if inst, _ := tenant.GetInstance(ctx, plain); inst.State != sdk.StateRunning || inst.HostID != dst.id {
		t.Fatalf("after more passes: %+v", inst)
	}
}

// TestHostDrainNamesWhatCannotMove: a VM no host has room for is named with placement's reason
// and stays where it is; a live drain on test-driver hosts is refused with the reason, or moves
// by restarting with fallback; hosts can report only on their own moves, each its own part.
func TestHostDrainNamesWhatCannotMove(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env := sdktest.New(t)
	registerBase(t, env)
	src := startMoveHost(t, env, env.URL, "node-a", 8)
	dst := startMoveHost(t, env, env.URL, "node-b", 2) // room for one VM of two vCPUs
	op := env.OperatorClient
	tenant := env.Client(t, env.A.AdminKey)
	if _, err := op.CordonHost(ctx, dst.id); err != nil {
		t.Fatal(err)
	}
	typ := cpuType(t, env, "cpu-two", 2)
	var ids []string
	for _, name := range []string{"vm-1", "vm-2"} {
		inst, err := tenant.CreateInstance(ctx, sdk.CreateInstanceRequest{Name: name, InstanceTypeID: typ, Image: "base"})
		if err != nil {
			t.Fatal(err)
		}
		src.converge(tenant, inst.ID, sdk.StateRunning)
		ids = append(ids, inst.ID)
	}
	if _, err := op.UncordonHost(ctx, dst.id); err != nil {
		t.Fatal(err)
	}

	// Live, without fallback: refused with the reason; nothing is reserved.
	d, err := op.StartMoveDrainHost(ctx, src.id, sdk.HostDrainOptions{Live: true})
	if err != nil || d.Counts["unplaced"] != 2 || !strings.Contains(d.Moves[0].Reason, "test driver") {
		t.Fatalf("live drain: %+v %v", d, err)
	}
	if h, _ := op.GetHost(ctx, dst.id); h.UsedVCPUs != 0 {
		t.Fatalf("a refused live drain reserved %d vcpus", h.UsedVCPUs)
	}
	// Live with fallback: restarted instead, with a note; one VM fits, the other is named.
	d, err = op.StartMoveDrainHost(ctx, src.id, sdk.HostDrainOptions{Live: true, Fallback: true})
	if err != nil || d.Counts["pending"] != 1 || d.Counts["unplaced"] != 1 {
		t.Fatalf("fallback drain: %+v %v", d, err)
	}
	var moving, stuck sdk.HostMove
	for _, m := range d.Moves {
		if m.State == "pending" {
			moving = m
		} else {
			stuck = m
		}
	}
	if moving.Mode != "restart" || !strings.Contains(moving.Note, "restarted on the target instead") ||
		stuck.Reason != "no capacity: a host with room for the VM" || stuck.InstanceName == "" {
		t.Fatalf("moves: %+v / %+v", moving, stuck)
	}

	// Only a move's own hosts may report on it, each only its part.
	stranger := startMoveHost(t, env, env.URL, "node-c", 2)
	if _, err := op.CordonHost(ctx, stranger.id); err != nil { // no room for drains there
		t.Fatal(err)
	}
	report := func(h *host, state string) error {
		return h.cp.ReportMove(ctx, moving.ID, api.HostMoveReport{State: state})
	}
	if err := report(stranger, api.HostMoveDone); !controlplane.IsNotFound(err) {
		t.Fatalf("another host's done: %v", err)
	}
	if err := report(stranger, api.HostMoveFailed); !controlplane.IsNotFound(err) {
		t.Fatalf("another host's failed: %v", err)
	}
	if err := report(dst, api.HostMoveDone); err == nil || !strings.Contains(err.Error(), "409") {
		t.Fatalf("the target's done before the source is ready: %v", err)
	}
	if err := report(src, api.HostMoveDone); err == nil || !strings.Contains(err.Error(), "409") {
		t.Fatalf("the source's done: %v", err)
	}
	if err := dst.cp.ReportMove(ctx, moving.ID, api.HostMoveReport{State: "teleported"}); err == nil || !strings.Contains(err.Error(), "state") {
		t.Fatalf("a bad state: %v", err)
	}
	d, _ = op.GetHostDrain(ctx, src.id)
	if d.Counts["pending"] != 1 {
		t.Fatalf("refused reports changed the drain: %+v", d)
	}

	// The source stops the VM and offers it; the target fails (say, it cannot start it): the
	// target's room comes back and the source starts the VM again, which the tenant never saw stop.
	pass(t, src)
	if doms, _ := src.hv.List(); stateOf(doms, moving.InstanceID) != virt.Stopped {
		t.Fatalf("the source did not stop the moving VM: %+v", doms)
	}
	if err := dst.cp.ReportMove(ctx, moving.ID, api.HostMoveReport{State: api.HostMoveFailed, Reason: "no KVM today"}); err != nil {
		t.Fatal(err)
	}
	d, _ = op.GetHostDrain(ctx, src.id)
	if d.Counts["failed"] != 1 || !strings.Contains(d.Moves[0].Reason+d.Moves[1].Reason, "the target host: no KVM today") {
		t.Fatalf("after the target's failure: %+v", d)
	}
	if h, _ := op.GetHost(ctx, dst.id); h.UsedVCPUs != 0 {
		t.Fatalf("a failed move keeps %d vcpus of the target", h.UsedVCPUs)
	}
	pass(t, src, dst)
	if doms, _ := src.hv.List(); stateOf(doms, moving.InstanceID) != virt.Running {
		t.Fatalf("the source did not start the VM again: %+v", doms)
	}
	if got := history(t, tenant, moving.InstanceID); got != "pending,provisioning,running" {
		t.Fatalf("states %q", got)
	}

	// Drained again, the target goes silent mid-copy (the test dates its last word back): after
	// MoveStall the move fails with why, and the source starts the VM again.
	if d, err = op.StartMoveDrainHost(ctx, src.id, sdk.HostDrainOptions{}); err != nil || d.Counts["pending"] != 1 {
		t.Fatalf("drain again: %+v %v", d, err)
	}
	pass(t, src)
	if _, err := env.Store.Pool.Exec(ctx, `UPDATE host_moves SET updated_at = now() - interval '16 minutes' WHERE state = 'copying'`); err != nil {
		t.Fatal(err)
	}
	pass(t, src, src)
	d, _ = op.GetHostDrain(ctx, src.id)
	if d.Counts["failed"] != 1 || !strings.Contains(d.Moves[0].Reason+d.Moves[1].Reason, "no word from the target host for 15m0s") {
		t.Fatalf("after the target went silent: %+v", d)
	}
	if doms, _ := src.hv.List(); stateOf(doms, moving.InstanceID) != virt.Running {
		t.Fatalf("the source did not start the VM again: %+v", doms)
	}

	// A drain again plans what is left: the move runs; the VM without room stays, running.
	if d, err = op.StartMoveDrainHost(ctx, src.id, sdk.HostDrainOptions{}); err != nil || d.Counts["pending"] != 1 {
		t.Fatalf("drain again: %+v %v", d, err)
	}
	for range 3 {
		pass(t, src, dst)
	}
	d, _ = op.GetHostDrain(ctx, src.id)
	if d.Counts["done"] != 1 || d.Counts["unplaced"] != 1 || d.Remaining != 1 {
		t.Fatalf("after the move: %+v", d)
	}
	if inst, _ := tenant.GetInstance(ctx, stuck.InstanceID); inst.HostID != src.id || inst.State != sdk.StateRunning {
		t.Fatalf("the VM without room: %+v", inst)
	}
	if inst, _ := tenant.GetInstance(ctx, moving.InstanceID); inst.HostID != dst.id || inst.State != sdk.StateRunning {
		t.Fatalf("the moved VM: %+v", inst)
	}
	if doms, _ := src.hv.List(); len(doms) != 1 || stateOf(doms, stuck.InstanceID) != virt.Running {
		t.Fatalf("source domains: %+v", doms)
	}
}

// TestHostDrainKeepsPrivateAddress: on tenant networks, the target reserves the VM's address
// from the source for the new domain's MAC in the tenant network's DHCP, before the VM first
// starts there; the reservation goes with the domain. (The test driver's DHCP is no dnsmasq: its
// made-up leases do not honour reservations, so the test reads the reservation itself.)
func TestHostDrainKeepsPrivateAddress(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env := sdktest.New(t)
	registerBase(t, env)
	src := startMoveHost(t, env, env.URL, "node-a", 8, "tenant")
	dst := startMoveHost(t, env, env.URL, "node-b", 8, "tenant")
	op := env.OperatorClient
	tenant := env.Client(t, env.A.AdminKey)
	typ := cpuType(t, env, "cpu-net", 2)
	create := func(name string, on, off *host) string {
		if _, err := op.CordonHost(ctx, off.id); err != nil {
			t.Fatal(err)
		}
		inst, err := tenant.CreateInstance(ctx, sdk.CreateInstanceRequest{Name: name, InstanceTypeID: typ, Image: "base"})
		if err != nil || inst.HostID != on.id {
			t.Fatalf("create %s: %+v %v", name, inst, err)
		}
		if _, err := op.UncordonHost(ctx, off.id); err != nil {
			t.Fatal(err)
		}
		on.converge(tenant, inst.ID, sdk.StateRunning)
		return inst.ID
	}
	vm := create("vm-net", src, dst)
	neighbour := create("vm-stays", dst, src) // keeps the tenant's network on node-b up
	var pk uint16
	if err := env.Store.Pool.QueryRow(ctx, `SELECT partition_key FROM tenants WHERE id = $1`, env.A.ID).Scan(&pk); err != nil {
		t.Fatal(err)
	}
	n, err := virt.TenantNetwork(pk)
	if err != nil {
		t.Fatal(err)
	}
	before, err := tenant.GetInstance(ctx, vm)
	want := before.PrivateAddress // the source's lease, as hostd reported it
	if a, perr := netip.ParseAddr(want); err != nil || perr != nil || !n.Subnet.Contains(a) {
		t.Fatalf("private address on the source %q (%v)", want, err)
	}

	if d, err := op.StartMoveDrainHost(ctx, src.id, sdk.HostDrainOptions{}); err != nil || d.Counts["pending"] != 1 {
		t.Fatalf("plan %+v %v", d, err)
	}
	pass(t, src, dst, src)
	inst, err := tenant.GetInstance(ctx, vm)
	if err != nil || inst.HostID != dst.id || inst.State != sdk.StateRunning || inst.PrivateAddress == "" {
		t.Fatalf("after the move: %+v %v", inst, err)
	}
	mac, err := dst.hv.TenantMAC(virt.DomainName(vm))
	if err != nil || mac == "" {
		t.Fatalf("MAC on the target: %q %v", mac, err)
	}
	hosts, err := dst.hv.DHCPHosts(n)
	if err != nil || hosts[mac] != want || len(hosts) != 1 {
		t.Fatalf("the target's DHCP reservations %v (%v), want %s for %s", hosts, err, want, mac)
	}
	// Deleted, the VM's reservation goes with its domain; its neighbour's network stays.
	if _, err := tenant.DeleteInstance(ctx, vm); err != nil {
		t.Fatal(err)
	}
	pass(t, dst, dst)
	if hosts, err := dst.hv.DHCPHosts(n); err != nil || len(hosts) != 0 {
		t.Fatalf("reservations after the delete: %v %v", hosts, err)
	}
	if inst, _ := tenant.GetInstance(ctx, neighbour); inst.State != sdk.StateRunning {
		t.Fatalf("the neighbour: %+v", inst)
	}
}
