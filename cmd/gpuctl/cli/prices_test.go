package cli

import (
	"strconv"
	"strings"
	"testing"
)

func TestParseMicros(t *testing.T) {
	for in, want := range map[string]int64{"2.50": 2_500_000, "0": 0, "0.000001": 1, ".5": 500_000, "10000": 10_000_000_000, "0.3": 300_000} {
		if got, err := parseMicros(in); err != nil || got != want {
			t.Errorf("parseMicros(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for in, reason := range map[string]string{"": "not a price", ".": "not a price", "2.": "not a decimal", "-1": "not a decimal",
		"1e3": "not a decimal", "0.0000001": "more than 6", "1,5": "not a decimal", "99999999999999999": "too large", " 1": "not a decimal"} {
		if _, err := parseMicros(in); err == nil || !strings.Contains(err.Error(), reason) {
			t.Errorf("parseMicros(%q): %v, want an error saying %q", in, err, reason)
		}
	}
	for c, want := range map[int64]string{375: "3.75", 5: "0.05", 0: "0.00", -150: "-1.50", -5: "-0.05"} {
		if got := cents(c); got != want {
			t.Errorf("cents(%d) = %q, want %q", c, got, want)
		}
	}
	for m, want := range map[int64]string{2_500_000: "2.50", 0: "0.00", 1: "0.000001", 55_000: "0.055", 10_000_000_000: "10000.00", -1_250_000: "-1.25"} {
		if got := formatMicros(m); got != want {
			t.Errorf("formatMicros(%d) = %q, want %q", m, got, want)
		}
	}
}

// FuzzParseMicros: any text is refused or read exactly: what formatMicros prints of it reads
// back as the same value, and it equals the text's own digits.
func FuzzParseMicros(f *testing.F) {
	for _, s := range []string{"2.50", "0", ".5", "1.000001", "", "1e9", "-0", "007.10"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := parseMicros(s)
		if err != nil {
			return
		}
		if m < 0 {
			t.Fatalf("%q read as negative %d", s, m)
		}
		back, err := parseMicros(formatMicros(m))
		if err != nil || back != m {
			t.Fatalf("%q: %d prints as %q, which reads as %d (%v)", s, m, formatMicros(m), back, err)
		}
		whole, frac, _ := strings.Cut(s, ".")
		w, _ := strconv.ParseInt("0"+whole, 10, 64)
		fr, _ := strconv.ParseInt((frac + "000000")[:6], 10, 64)
		if w*1_000_000+fr != m {
			t.Fatalf("%q read as %d", s, m)
		}
	})
}
