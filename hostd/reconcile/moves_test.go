package reconcile

import (
	"context"
	"errors"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"gpucloud/api"
	"gpucloud/hostd/transfer"
)

const moveSecret = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

// A target hostd killed anywhere in a move's import (after the copy, after the marker, after the
// define or the start) converges when it comes back: the disk is imported whole, onto this
// host's base image, the VM runs and the move is reported done; nothing half-copied is left.
func TestMoveInSurvivesKills(t *testing.T) {
	for _, point := range []string{"fetched-disk", "moved-in", "defined", "started"} {
		t.Run(point, func(t *testing.T) {
			e := newEnv(t, 0)
			// The source's side: an overlay over the source's own base image (another path).
			srcDir := t.TempDir()
			srcBase := filepath.Join(srcDir, "base.qcow2")
			disk := filepath.Join(srcDir, "disk.qcow2")
			for _, args := range [][]string{{"create", "-q", "-f", "qcow2", srcBase, "64M"},
				{"create", "-q", "-f", "qcow2", "-b", srcBase, "-F", "qcow2", disk, "1G"}} {
				if out, err := exec.Command("qemu-img", args...).CombinedOutput(); err != nil {
					t.Fatalf("qemu-img %v: %v %s", args, err, out)
				}
			}
			if out, err := exec.Command("qemu-io", "-f", "qcow2", "-c", "write -P 0x5a 0 64k", disk).CombinedOutput(); err != nil {
				t.Fatalf("%v %s", err, out)
			}
			var ex transfer.Exports
			ex.Offer("0190c0de-0000-7000-8000-00000000000a", moveSecret, map[string]string{"disk": disk})
			src := httptest.NewServer(ex.Handler())
			defer src.Close()

			d := instance("vm-in", "tenantA", 0x11)
			d.Move = &api.HostMove{ID: "0190c0de-0000-7000-8000-00000000000a", Role: api.MoveIn, Phase: api.MoveCopying, Mode: "restart",
				Secret: moveSecret, Source: strings.TrimPrefix(src.URL, "http://")}
			e.cp.Put(d)
			first := e.hostd()
			first.crashAt = func(p string) bool { return p == point }
			if err := first.Once(context.Background()); !errors.Is(err, errKilled) {
				t.Fatalf("first pass: %v, want killed at %s", err, point)
			}
			second := e.hostd()
			for range 3 {
				if err := second.Once(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			reps := e.cp.MoveReports(d.Move.ID)
			if len(reps) == 0 || reps[len(reps)-1].State != api.HostMoveDone || reps[len(reps)-1].Observed == nil ||
				reps[len(reps)-1].Observed.State != api.ObservedRunning {
				t.Fatalf("reports %+v", reps)
			}
			for _, r := range reps {
				if r.State == api.HostMoveFailed {
					t.Fatalf("a kill failed the move: %+v", r)
				}
			}
			if dom, ok := e.domains()["vm-in"]; !ok || dom.State != "running" {
				t.Fatalf("domain %+v %v", dom, ok)
			}
			if _, ok := e.cp.Observed("vm-in"); ok {
				t.Fatal("the target reported the instance as its own before the move was done")
			}
			got := filepath.Join(e.data, "instances", "vm-in", "disk.qcow2")
			if out, err := exec.Command("qemu-io", "-f", "qcow2", "-c", "read -P 0x5a 0 64k", got).CombinedOutput(); err != nil ||
				strings.Contains(string(out), "fail") {
				t.Fatalf("the imported disk: %v %s", err, out)
			}
			if info, _ := exec.Command("qemu-img", "info", "-U", got).Output(); !strings.Contains(string(info), e.images) {
				t.Fatalf("the imported disk does not back onto this host's base image:\n%s", info)
			}
			if _, err := os.Stat(got + ".part"); !os.IsNotExist(err) {
				t.Fatalf("a part file is left: %v", err)
			}
		})
	}
}
