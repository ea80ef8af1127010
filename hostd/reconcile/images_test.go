package reconcile

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"gpucloud/api"
	"gpucloud/hostd/images"
)

// An instance whose image has a registered source gets it fetched, verified and cached before
// its disk is made over it; an image whose bytes do not match fails the instance and leaves the
// host as it was (no domain, no files, the VF back).
func TestImageFetchedAndVerified(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 2)
	h := e.hostd()
	src := filepath.Join(t.TempDir(), "mirror.qcow2")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", src, "64M").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	sum, err := images.HashFile(src)
	if err != nil {
		t.Fatal(err)
	}
	good := instance("g1", "tenantA", 0x11)
	good.Spec.Image, good.Spec.ImageSource, good.Spec.ImageSHA256 = "mirrored", "file://"+src, sum
	bad := instance("b1", "tenantA", 0x11)
	bad.Spec.Image, bad.Spec.ImageSource, bad.Spec.ImageSHA256 = "tampered", "file://"+src, strings.Repeat("0", 64)
	e.cp.Put(good)
	e.cp.Put(bad)
	_ = h.Once(ctx) // b1's failure is joined into the result

	if o := e.observed("g1"); o.State != api.ObservedRunning {
		t.Fatalf("g1 %+v", o)
	}
	if _, err := os.Stat(filepath.Join(e.images, "mirrored.qcow2")); err != nil {
		t.Fatalf("image not cached: %v", err)
	}
	o := e.observed("b1")
	if o.State != api.ObservedFailed || !strings.Contains(o.Reason, "checksum mismatch") {
		t.Fatalf("b1 %+v", o)
	}
	if _, has := e.domains()["b1"]; has {
		t.Fatal("b1 was defined over an unverified image")
	}
	if _, has := e.claims()["b1"]; has {
		t.Fatal("b1 keeps its VF")
	}
	if _, err := os.Stat(filepath.Join(e.images, "tampered.qcow2")); err == nil {
		t.Fatal("an unverified image was cached")
	}
}
