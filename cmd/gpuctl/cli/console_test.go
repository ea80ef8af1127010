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

func TestEscapeFilter(t *testing.T) {
	for _, c := range []struct {
		in   []string // reads, in order
		send string
		quit bool
	}{
		{[]string{"ls\r"}, "ls\r", false},
		{[]string{"ls\r", "\x1d", "rm"}, "ls\r", true}, // Ctrl+] anywhere
		{[]string{"ab\x1dcd"}, "ab", true},             // what came before is sent
		{[]string{"~."}, "", true},                     // at the very start
		{[]string{"uptime\r~", "."}, "uptime\r", true}, // split across reads
		{[]string{"a~.b\r"}, "a~.b\r", false},          // not at a line's start
		{[]string{"\r~~.\r"}, "\r~.\r", false},         // ~~ sends one ~
		{[]string{"\n~x"}, "\n~x", false},              // ~ then anything else: both sent
		{[]string{"echo hi\n~", "x\r", "~."}, "echo hi\n~x\r", true},
	} {
		var e escapeFilter
		var sent strings.Builder
		quit := false
		for _, r := range c.in {
			s, q := e.feed([]byte(r))
			sent.Write(s)
			if q {
				quit = true
				break
			}
		}
		if sent.String() != c.send || quit != c.quit {
			t.Errorf("%q: sent %q quit %v, want %q %v", c.in, sent.String(), quit, c.send, c.quit)
		}
	}
}

func FuzzEscapeFilter(f *testing.F) {
	f.Add([]byte("ls\r~.\x1d~~"))
	f.Fuzz(func(t *testing.T, in []byte) {
		var e escapeFilter
		send, quit := e.feed(in)
		// Nothing is invented: without an escape, at most the held "~" is missing.
		if !quit && len(send) > len(in) {
			t.Fatalf("sent %q for %q", send, in)
		}
		if strings.Contains(string(send), "\x1d") {
			t.Fatalf("sent the escape key: %q", send)
		}
	})
}
