package reconcile

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"gpucloud/api"
	"gpucloud/hostd/controlplane/cpfake"
	"gpucloud/hostd/virt"
	"gpucloud/internal/sshtest"
)

// TestRealVMVolumeSurvivesStopStartAndMoves: a volume from hostd's pool is a disk of a real VM
// (QEMU TCG through libvirt); what the guest writes to it is there after a stop and a start, and,
// detached and attached to a second VM, that VM reads it back.
func TestRealVMVolumeSurvivesStopStartAndMoves(t *testing.T) {
	ctx, hv, cfg, dir := sshGuestHost(t)
	key := sshtest.New(t, "tenant@test")
	port1, port2 := freePort(t), freePort(t)
	pool := fmt.Sprintf("gpucloud-vmtest-%d", time.Now().UnixNano()%1e9)
	t.Cleanup(func() { hv.RemovePool(pool) })
	cp := cpfake.New(t, "host-secret")
	cfg.ControlPlane, cfg.Ports = cp.Client(t), PortRange{First: min(port1, port2), Last: max(port1, port2)}
	cfg.VolumePool, cfg.VolumeDir, cfg.StopGrace = pool, filepath.Join(dir, "volumes"), time.Second
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pass := func() {
		t.Helper()
		if err := r.Once(ctx); err != nil {
			t.Fatal(err)
		}
	}
	run := func(id, cmd string) string {
		t.Helper()
		o, _ := cp.Observed(id)
		if len(o.Forwards) == 0 {
			t.Fatalf("%s has no SSH port: %+v", id, o)
		}
		addr := net.JoinHostPort(o.PublicHost, fmt.Sprint(o.Forwards[0].HostPort))
		cfg := &ssh.ClientConfig{User: "root", Auth: []ssh.AuthMethod{ssh.PublicKeys(key.Signer)},
			HostKeyCallback: ssh.InsecureIgnoreHostKey(), Timeout: 5 * time.Second}
		for {
			client, err := ssh.Dial("tcp", addr, cfg)
			if err == nil {
				defer client.Close()
				sess, err := client.NewSession()
				if err != nil {
					t.Fatal(err)
				}
				out, err := sess.CombinedOutput(cmd)
				if err != nil {
					t.Fatalf("%s: %q: %v %s", id, cmd, err, out)
				}
				return strings.TrimSpace(string(out))
			}
			select {
			case <-ctx.Done():
				b, _ := os.ReadFile(r.paths(id).console)
				t.Fatalf("no SSH login to %s: %v\nconsole:\n%s", id, err, b)
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
	const vol, data = "vol-real", "volume-data-0451"
	cp.SetVolumes([]api.DesiredVolume{{ID: vol, SizeGiB: 1}})
	stamp := time.Now().UnixNano() % 1e9
	vm1, vm2 := instance(fmt.Sprintf("vmvol1-%d", stamp), "tenant-vol", 0), instance(fmt.Sprintf("vmvol2-%d", stamp), "tenant-vol", 0)
	for _, in := range []*api.DesiredInstance{&vm1, &vm2} {
		in.Spec.VCPUs, in.Spec.MemoryMiB, in.Spec.SSHKeys = 1, 256, []string{key.Line}
		defer hv.Undefine(virt.DomainName(in.ID))
	}
	vm1.Spec.Volumes = []api.VolumeAttachment{{ID: vol, Device: "vdb"}}
	cp.Put(vm1)
	pass()
	run(vm1.ID, "test -b /dev/vdb && echo "+data+" | dd of=/dev/vdb conv=fsync 2>/dev/null") // a block device, not a file in /dev

	cp.SetDesired(vm1.ID, api.DesiredStopped)
	for deadline := time.Now().Add(30 * time.Second); ; {
		pass()
		if o, _ := cp.Observed(vm1.ID); o.State == api.ObservedStopped {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("vm1 did not stop")
		}
		time.Sleep(time.Second)
	}
	cp.SetDesired(vm1.ID, api.DesiredRunning)
	pass()
	if got := run(vm1.ID, "dd if=/dev/vdb bs=16 count=1 2>/dev/null"); got != data {
		t.Fatalf("after stop and start vm1 reads %q, want %q", got, data)
	}

	// Detached from vm1 (stopped first: the appliance has no hot-unplug handshake to wait for)
	// and attached to vm2, which reads it back.
	vm1.DesiredState, vm1.Spec.Volumes = api.DesiredDeleted, nil
	cp.Put(vm1)
	vm2.Spec.Volumes = []api.VolumeAttachment{{ID: vol, Device: "vdb"}}
	cp.Put(vm2)
	pass()
	if got := run(vm2.ID, "dd if=/dev/vdb bs=16 count=1 2>/dev/null"); got != data {
		t.Fatalf("vm2 reads %q from the volume, want %q", got, data)
	}
	if ids, _ := hv.Volumes(pool); len(ids) != 1 {
		t.Fatalf("pool holds %v after vm1's deletion", ids)
	}
	cp.SetDesired(vm2.ID, api.DesiredDeleted)
	cp.SetVolumes([]api.DesiredVolume{})
	pass()
	if ids, _ := hv.Volumes(pool); len(ids) != 0 {
		t.Fatalf("pool holds %v after the volume's deletion", ids)
	}
}
