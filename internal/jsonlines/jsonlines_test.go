package jsonlines

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type rec struct {
	ID string `json:"id"`
}

func valid(r *rec) bool { return r.ID != "" }

func TestOpenCutsTornTailAndAppends(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(path, []byte("{\"id\":\"a\"}\n{\"id\":\"b\"}\n{\"id\":\"c"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, got, err := Open(path, 0o600, "a record", valid)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != "a" || got[1].ID != "b" {
		t.Fatalf("read %+v, want a and b (the torn c left out)", got)
	}
	if err := Append(f, rec{ID: "d"}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	raw, _ := os.ReadFile(path)
	if string(raw) != "{\"id\":\"a\"}\n{\"id\":\"b\"}\n{\"id\":\"d\"}\n" {
		t.Fatalf("file after reopen and append:\n%s", raw)
	}
}

func TestBadLineIsNamed(t *testing.T) {
	for _, body := range []string{"{\"id\":\"a\"}\nnot json\n", "{\"id\":\"a\"}\n{\"id\":\"\"}\n"} {
		_, _, err := Read(strings.NewReader(body), "a record", valid)
		if err == nil || !strings.Contains(err.Error(), "line 2 is not a record") {
			t.Errorf("%q: got %v, want line 2 named", body, err)
		}
	}
	path := filepath.Join(t.TempDir(), "log")
	os.WriteFile(path, []byte("garbage\n"), 0o600)
	if _, _, err := Open(path, 0o600, "a record", valid); err == nil {
		t.Fatal("opened a file whose first line is garbage")
	}
	if raw, _ := os.ReadFile(path); string(raw) != "garbage\n" {
		t.Fatalf("a refused file was changed: %q", raw)
	}
}
