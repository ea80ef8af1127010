package ingest

import (
	"strings"
	"testing"

	"github.com/google/uuid"
)

// checkText's byte-at-a-time path accepts only what the rune-by-rune checks accept.
func FuzzCheckTextFastPath(f *testing.F) {
	for _, s := range []string{"gpusrv-1/sess/42", " lead", "trail ", "tab\there", "nul\x00", "del\x7f", "é", "\u2028", "", strings.Repeat("x", 200)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fast := checkText("f", s, 128) == nil
		slow := checkTextRunes("f", s, 128) == nil
		if fast != slow {
			t.Fatalf("%q: checkText accepts %v, the rune checks %v", s, fast, slow)
		}
	})
}

// A tenant id in any form uuid.Parse reads is stored in the canonical form; a canonical one is
// kept as it is.
func TestCanonicalUUID(t *testing.T) {
	u := uuid.MustParse("6ba7b810-9dad-11d1-80b4-00c04fd430c8")
	for _, s := range []string{"6BA7B810-9DAD-11D1-80B4-00C04FD430C8", "{6ba7b810-9dad-11d1-80b4-00c04fd430c8}",
		"urn:uuid:6ba7b810-9dad-11d1-80b4-00c04fd430c8", "6ba7b8109dad11d180b400c04fd430c8", u.String()} {
		if got := canonicalUUID(s, uuid.MustParse(s)); got != u.String() {
			t.Errorf("%s: %s, want %s", s, got, u)
		}
	}
	canonical := u.String()
	if n := testing.AllocsPerRun(10, func() { canonicalUUID(canonical, u) }); n != 0 {
		t.Fatalf("a canonical id is copied (%v allocations)", n)
	}
}
