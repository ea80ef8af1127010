package validate

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzUTF8JSON: any body is either valid UTF-8 (nil) or refused with a field named.
func FuzzUTF8JSON(f *testing.F) {
	for _, s := range []string{`{"name":"a"}`, "{\"a\":[1,{\"b\":\"\xff\"}]}", "\xff", `{"k":`, "[\"\xc3\"]"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		err := UTF8JSON(body)
		if (err == nil) != utf8.Valid(body) {
			t.Fatalf("UTF8JSON(%q) = %v", body, err)
		}
		if err != nil && err.Field == "" {
			t.Fatalf("no field named for %q", body)
		}
	})
}

// FuzzDecoded: whatever JSON decodes into a request, Decoded does not panic, and what it passes
// holds no NUL and fits the columns.
func FuzzDecoded(f *testing.F) {
	f.Add(`{"key":"a","count":1,"items":[{"name":"x","n":2}],"labels":{"a":"b"},"need":1}`)
	f.Add(`{"count":99999999999}`)
	f.Fuzz(func(t *testing.T, body string) {
		var r req
		if json.Unmarshal([]byte(body), &r) != nil {
			return
		}
		if Decoded(&r) != nil {
			return
		}
		if strings.Contains(r.Key, "\x00") || r.Count > 1<<31-1 || r.Count < -1<<31 || r.Bytes > 1<<63-1 || r.Need == nil {
			t.Fatalf("passed %+v", r)
		}
	})
}

// FuzzTextRules: an accepted name or image stays inside hostd's images folder and is printable;
// an accepted label holds no control or bidi character.
func FuzzTextRules(f *testing.F) {
	for _, s := range []string{"demo", "../etc/passwd", "-", "a\u202eb", "\x1b[2J"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, check := range []func(string) error{Name, Image} {
			if check(s) == nil && (s == "" || strings.ContainsAny(s, "/\\ \x00\n") || s[0] == '.' || s[0] == '-' || len(s) > 63) {
				t.Fatalf("accepted %q", s)
			}
		}
		if Label(s, 1000) == nil && strings.IndexFunc(s, forbiddenInLabel) >= 0 {
			t.Fatalf("label %q accepted", s)
		}
	})
}
