package inventory

import (
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func pci(s string, domain, bus, device uint32) nvml.PciInfo {
	p := nvml.PciInfo{Domain: domain, Bus: bus, Device: device}
	copy(p.BusId[:], s)
	return p
}

func TestBusID(t *testing.T) {
	for _, tc := range []struct {
		in   nvml.PciInfo
		want string
	}{
		{pci("00000000:17:00.0", 0, 0x17, 0), "0000:17:00.0"},
		{pci("00000001:AB:00.0", 1, 0xab, 0), "0001:ab:00.0"},           // the domain's low 16 bits are kept
		{pci("0000:65:00.0", 0, 0x65, 0), "0000:65:00.0"},               // already short
		{pci("", 2, 0x3b, 0), "0002:3b:00.0"},                           // no string: from the numbers
		{pci("", 0, 0, 0), ""},                                          // nothing known
		{pci("00010000:17:00.0", 0x10000, 0x17, 0), "00010000:17:00.0"}, // a wide domain stays whole
		{pci("00:17\xff", 0, 0x17, 0), "0000:17:00.0"},                  // garbage: from the numbers
	} {
		if got := busID(tc.in); got != tc.want {
			t.Errorf("busID(%q) = %q, want %q", tc.in.BusId, got, tc.want)
		}
	}
}

// FuzzBusID feeds NVML's fixed 32-byte field arbitrary bytes: busID must not panic, must stop at
// the first NUL and must never lengthen the id.
func FuzzBusID(f *testing.F) {
	f.Add([]byte("00000000:17:00.0"))
	f.Add([]byte("0000:65:00.0"))
	f.Add([]byte(":::::"))
	f.Add([]byte("00000000:"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var p nvml.PciInfo
		copy(p.BusId[:], b)
		got := busID(p)
		if strings.ContainsRune(got, 0) || len(got) > len(p.BusId) {
			t.Fatalf("busID(%q) = %q", b, got)
		}
		if strings.Trim(got, "0123456789abcdef:.") != "" {
			t.Fatalf("busID(%q) = %q holds other than lower-case hex, ':' and '.'", b, got)
		}
	})
}
