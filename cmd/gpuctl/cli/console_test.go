package cli

import (
	"strings"
	"testing"
)

func TestNewConsoleOutput(t *testing.T) {
	for _, c := range []struct{ before, now, want string }{
		{"", "boot\n", "boot\n"},
		{"boot\n", "boot\nlogin: ", "login: "},
		{"abcdef", "defghi", "ghi"}, // the window slid
		{"abc", "abc", ""},
		{"abc", "xyz", "xyz"}, // nothing in common: all of it is new
	} {
		if got := newOutput(c.before, c.now); got != c.want {
			t.Errorf("newOutput(%q, %q) = %q, want %q", c.before, c.now, got, c.want)
		}
	}
}

// YAML prints large integers as integers, not 1.073741824e+10.
func TestYAMLKeepsIntegers(t *testing.T) {
	var b strings.Builder
	if err := encode(&b, "yaml", map[string]any{"gpu_memory_bytes": int64(10737418240), "ratio": 0.5}); err != nil {
		t.Fatal(err)
	}
	if got := b.String(); !strings.Contains(got, "gpu_memory_bytes: 10737418240\n") || !strings.Contains(got, "ratio: 0.5\n") {
		t.Fatalf("yaml:\n%s", got)
	}
}
