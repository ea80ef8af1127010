package sriov

import (
	"fmt"
	"strconv"
	"strings"
)

// maxVFs bounds what a sysfs count file may claim; PCIe SR-IOV allows at most 65535 VFs per PF
// and real InfiniBand adapters offer far fewer, so anything larger is a corrupt file.
const maxVFs = 4096

// parseCount reads sriov_totalvfs / sriov_numvfs: a decimal number and a newline.
func parseCount(name, content string) (int, error) {
	s := strings.TrimSpace(content)
	if s == "" {
		return 0, fmt.Errorf("%s: empty, want a number of VFs", name)
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a number of VFs", name, truncate(s))
	}
	if n < 0 || n > maxVFs {
		return 0, fmt.Errorf("%s: %d VFs is out of range 0-%d", name, n, maxVFs)
	}
	return n, nil
}

// parsePCIAddress checks a PCI address in sysfs form, domain:bus:device.function
// (e.g. 0000:3b:00.1), and returns it lower-cased.
func parsePCIAddress(s string) (string, error) {
	bad := func(why string) error { return fmt.Errorf("PCI address %q: %s", truncate(s), why) }
	if len(s) != 12 || s[4] != ':' || s[7] != ':' || s[10] != '.' {
		return "", bad("want the form DDDD:BB:DD.F")
	}
	for i, c := range s {
		if i == 4 || i == 7 || i == 10 {
			continue
		}
		if !isHex(c) {
			return "", bad("not hexadecimal")
		}
	}
	dev, _ := strconv.ParseUint(s[8:10], 16, 8)
	if dev > 0x1f {
		return "", bad("device number above 1f")
	}
	if fn := s[11]; fn > '7' {
		return "", bad("function number above 7")
	}
	return strings.ToLower(s), nil
}

// PCIParts splits a checked PCI address into the numbers libvirt's <hostdev> wants.
func PCIParts(addr string) (domain, bus, slot, function uint, err error) {
	a, err := parsePCIAddress(addr)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	d, _ := strconv.ParseUint(a[0:4], 16, 16)
	b, _ := strconv.ParseUint(a[5:7], 16, 8)
	s, _ := strconv.ParseUint(a[8:10], 16, 8)
	f, _ := strconv.ParseUint(a[11:12], 16, 8)
	return uint(d), uint(b), uint(s), uint(f), nil
}

// parseVirtfnIndex reads N from a "virtfnN" link name.
func parseVirtfnIndex(name string) (int, error) {
	s, ok := strings.CutPrefix(name, "virtfn")
	if !ok || s == "" {
		return 0, fmt.Errorf("%q is not a virtfnN link", truncate(name))
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n >= maxVFs || strconv.Itoa(n) != s {
		return 0, fmt.Errorf("%q: bad VF index", truncate(name))
	}
	return n, nil
}

func isHex(c rune) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
