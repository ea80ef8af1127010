package guesttest

import (
	"bytes"
	"encoding/hex"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"gpucloud/gpuserverd/wire"
)

// TestCWireDecoders runs the C decoders' malformed-payload checks and crosses payloads between
// the Go and C encoders in both directions.
func TestCWireDecoders(t *testing.T) {
	bin := filepath.Join(buildAll(t), "wire_test")
	if out, err := exec.Command(bin).CombinedOutput(); err != nil || !strings.Contains(string(out), "wire_test: OK") {
		t.Fatalf("C decoder checks: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "encode").Output()
	if err != nil {
		t.Fatal(err)
	}
	p, _ := hex.DecodeString(strings.TrimSpace(string(out)))
	var lk wire.LaunchKernel
	if err := lk.Decode(p); err != nil {
		t.Fatalf("Go decoding C's LaunchKernel: %v", err)
	}
	if lk.Function != 0x1122334455667788 || lk.GridZ != 9 || lk.BlockX != 256 || lk.SharedMem != 1024 ||
		lk.Stream != 42 || !bytes.Equal(lk.Params, []byte{1, 2, 3, 4, 5}) {
		t.Fatalf("C->Go LaunchKernel: %+v", lk)
	}
	di := &wire.DeviceInfoReply{Name: "NVIDIA H100 80GB HBM3", UUID: make([]byte, 16), TotalMemory: 85899345920,
		Major: 9, Minor: 0, PCIBusID: "00000000:18:00.0"}
	out, err = exec.Command(bin, "decode", hex.EncodeToString(di.Append(nil))).CombinedOutput()
	want := "name=NVIDIA H100 80GB HBM3 uuid_len=16 total=85899345920 major=9 minor=0 pci=00000000:18:00.0\n"
	if err != nil || string(out) != want {
		t.Fatalf("Go->C DeviceInfoReply: %v %q", err, out)
	}
}
