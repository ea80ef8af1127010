package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"

	"gpucloud/api"
	"gpucloud/hostd/controlplane"
	"gpucloud/hostd/virt"
	"gpucloud/internal/sshtest"
	"gpucloud/sdk"
	"gpucloud/sdk/sdktest"
)

// TestHostdThroughAPIServer drives a VM's whole life through the SDK against the real apiserver,
// with hostd's reconciler doing the host's side on libvirt's test driver.
func TestHostdThroughAPIServer(t *testing.T) {
	ctx := context.Background()
	env := sdktest.New(t)
	gsID, _ := env.GPUServer(t, "gs-e2e", 1)
	lib := filepath.Join(t.TempDir(), "libcuda.so.1")
	if err := os.WriteFile(lib, []byte("\x7fELF guest library stand-in"), 0o755); err != nil {
		t.Fatal(err)
	}
	h := startHost(t, env, lib, 8)
	tenant := env.Client(t, env.A.AdminKey)
	other := env.Client(t, env.B.AdminKey)

	hst, err := env.OperatorClient.GetHost(ctx, h.id)
	if err != nil || hst.InfiniBandVFs != 8 || hst.VCPUs == 0 || !strings.HasPrefix(hst.Hypervisor, "test://") {
		t.Fatalf("registered host %+v, %v", hst, err)
	}

	key, err := tenant.CreateSSHKey(ctx, sdk.CreateSSHKeyRequest{Name: "laptop", PublicKey: sshtest.New(t, "alice@laptop").Line})
	if err != nil {
		t.Fatal(err)
	}
	userData := "#!/bin/sh\necho hello > /tmp/hello\n"
	inst, err := tenant.CreateInstance(ctx, sdk.CreateInstanceRequest{Name: "vm1", InstanceTypeID: sharedType(t, env, "e2e-shared", env.ModelID), Image: "base",
		SSHKeyIDs: []string{key.ID}, UserData: userData})
	if err != nil {
		t.Fatal(err)
	}
	if inst.State != sdk.StatePending || inst.HostID != h.id || inst.GPUServerID != gsID {
		t.Fatalf("created %+v", inst)
	}
	if reserved(t, env, gsID) == 0 || usedVCPUs(t, env, h.id) != inst.VCPUs {
		t.Fatal("create reserved no GPU memory or host room")
	}

	inst = h.converge(tenant, inst.ID, sdk.StateRunning)
	if got := history(t, tenant, inst.ID); got != "pending,provisioning,running" {
		t.Fatalf("states %q, want pending,provisioning,running", got)
	}
	claims, err := h.pool.Claims()
	if err != nil || claims[inst.ID].VF.PCIAddress == "" || inst.VFPCIAddress != claims[inst.ID].VF.PCIAddress {
		t.Fatalf("API says VF %q, claims %+v (%v)", inst.VFPCIAddress, claims, err)
	}
	checkDomainXML(t, h, inst.ID, inst.VFPCIAddress)
	// Through the API, hostd's forward of the guest's SSH port is the tenant's ssh command, and the
	// key and user-data reached the VM's seed.
	if inst.SSH == nil || inst.SSH.Command != "ssh -p 24000 root@node-e2e.example" {
		t.Fatalf("ssh endpoint %+v", inst.SSH)
	}
	if got := seedFile(t, h, inst.ID, "/gpucloud/authorized_keys"); got != key.PublicKey+"\n" {
		t.Fatalf("seed authorized_keys %q, want %q", got, key.PublicKey)
	}
	if got := seedFile(t, h, inst.ID, "/gpucloud/user-data"); got != userData {
		t.Fatalf("seed user-data %q", got)
	}
	conf := seedFile(t, h, inst.ID, "/gpucloud/guest.conf")
	for _, want := range []string{"GPUCLOUD_INSTANCE_ID=" + inst.ID + "\n", "GPUCLOUD_ENDPOINT=gs-e2e:7000\n", "GPUCLOUD_TIER=shared\n"} {
		if !strings.Contains(conf, want) {
			t.Errorf("seed guest.conf lacks %q:\n%s", want, conf)
		}
	}
	if !strings.Contains(conf, "GPUCLOUD_TOKEN=") || strings.Contains(conf, "GPUCLOUD_TOKEN=\n") {
		t.Errorf("seed guest.conf has no token:\n%s", conf)
	}
	// Another tenant sees none of it.
	if _, err := other.GetInstance(ctx, inst.ID); !sdk.IsNotFound(err) {
		t.Fatalf("tenant B reading tenant A's instance: %v", err)
	}
	if _, err := other.StopInstance(ctx, inst.ID); !sdk.IsNotFound(err) {
		t.Fatalf("tenant B stopping tenant A's instance: %v", err)
	}

	if inst, err = tenant.StopInstance(ctx, inst.ID); err != nil || inst.State != sdk.StateStopping {
		t.Fatalf("stop: %+v %v", inst, err)
	}
	h.converge(tenant, inst.ID, sdk.StateStopped)
	if d := domain(t, h, inst.ID); d.State != virt.Stopped {
		t.Fatalf("domain %v after stop", d.State)
	}
	if _, err = tenant.StartInstance(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	h.converge(tenant, inst.ID, sdk.StateRunning)
	if inst, err = tenant.RebootInstance(ctx, inst.ID); err != nil || inst.RebootGeneration != 1 {
		t.Fatalf("reboot: %+v %v", inst, err)
	}
	h.converge(tenant, inst.ID, sdk.StateRunning)
	if d := domain(t, h, inst.ID); d.Meta.RebootGeneration != 1 || d.State != virt.Running {
		t.Fatalf("domain after reboot: %+v", d)
	}

	// Renewal hands out a fresh token while the instance lives.
	tok, err := h.cp.RenewToken(ctx, inst.ID)
	if err != nil || tok.Token == "" || tok.ExpiresAt.IsZero() {
		t.Fatalf("renew: %+v %v", tok, err)
	}

	if inst, err = tenant.DeleteInstance(ctx, inst.ID); err != nil || inst.State != sdk.StateDeleting {
		t.Fatalf("delete: %+v %v", inst, err)
	}
	h.converge(tenant, inst.ID, sdk.StateDeleted)
	if got := history(t, tenant, inst.ID); got != "pending,provisioning,running,stopping,stopped,pending,running,deleting,deleted" {
		t.Fatalf("states %q", got)
	}
	if n := reserved(t, env, gsID); n != 0 {
		t.Fatalf("GPU still has %d bytes reserved after delete", n)
	}
	if n := usedVCPUs(t, env, h.id); n != 0 {
		t.Fatalf("host still has %d vCPUs used after delete", n)
	}
	if doms, _ := h.hv.List(); len(doms) != 0 {
		t.Fatalf("domains left: %+v", doms)
	}
	if c, _ := h.pool.Claims(); len(c) != 0 {
		t.Fatalf("VF claims left: %+v", c)
	}
	// The apiserver drops a deleted instance from the host's list and answers 404 for it.
	desired, err := h.cp.DesiredInstances(ctx)
	want := desired.Instances
	if err != nil || len(want) != 0 {
		t.Fatalf("host still told about %+v (%v)", want, err)
	}
	if _, err := h.cp.RenewToken(ctx, inst.ID); !controlplane.IsNotFound(err) {
		t.Fatalf("renewal for a deleted instance: %v", err)
	}
	if err := h.cp.ReportInstance(ctx, "4b1c2f0e-0000-4000-8000-000000000000", api.InstanceObserved{State: api.ObservedRunning}); !controlplane.IsNotFound(err) {
		t.Fatalf("report for an unknown instance: %v", err)
	}
	// hostd shipped the VM's running time to billing, under its host id and the right tenant.
	var n int
	var tenantID string
	if err := env.Store.Pool.QueryRow(ctx, `SELECT count(*), coalesce(min(tenant_id::text), '') FROM billing_usage_records
		WHERE kind = 'vm' AND source = $1 AND instance_id = $2`, h.id, inst.ID).Scan(&n, &tenantID); err != nil {
		t.Fatal(err)
	}
	if n == 0 || tenantID != env.A.ID {
		t.Fatalf("VM usage records in billing: %d (tenant %q)", n, tenantID)
	}
}

func checkDomainXML(t *testing.T, h *host, id, vf string) {
	t.Helper()
	x, err := h.hv.XML(virt.DomainName(id))
	if err != nil {
		t.Fatal(err)
	}
	var dx libvirtxml.Domain
	if err := dx.Unmarshal(x); err != nil {
		t.Fatal(err)
	}
	seed := filepath.Join(h.data, "instances", id, "seed.iso")
	var hasSeed bool
	for _, d := range dx.Devices.Disks {
		hasSeed = hasSeed || (d.Device == "cdrom" && d.Source != nil && d.Source.File != nil && d.Source.File.File == seed)
	}
	if !hasSeed {
		t.Errorf("domain XML has no seed cdrom %s:\n%s", seed, x)
	}
	hd := dx.Devices.Hostdevs
	if len(hd) != 1 || hd[0].SubsysPCI == nil || hd[0].SubsysPCI.Source == nil || hd[0].SubsysPCI.Source.Address == nil {
		t.Fatalf("domain XML hostdevs %+v", hd)
	}
	a := hd[0].SubsysPCI.Source.Address
	if got := pciString(a); got != vf {
		t.Errorf("domain's VF %s, API's %s", got, vf)
	}
}

func pciString(a *libvirtxml.DomainAddressPCI) string {
	return fmt.Sprintf("%04x:%02x:%02x.%x", *a.Domain, *a.Bus, *a.Slot, *a.Function)
}

func domain(t *testing.T, h *host, id string) virt.Domain {
	t.Helper()
	doms, err := h.hv.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range doms {
		if d.Meta.InstanceID == id {
			return d
		}
	}
	t.Fatalf("no domain for %s", id)
	return virt.Domain{}
}

func reserved(t *testing.T, env *sdktest.Env, gsID string) int64 {
	t.Helper()
	gs, err := env.OperatorClient.GetGPUServer(context.Background(), gsID)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, g := range gs.GPUs {
		n += g.ReservedBytes
	}
	return n
}

func usedVCPUs(t *testing.T, env *sdktest.Env, hostID string) int {
	t.Helper()
	h, err := env.OperatorClient.GetHost(context.Background(), hostID)
	if err != nil {
		t.Fatal(err)
	}
	return h.UsedVCPUs
}
