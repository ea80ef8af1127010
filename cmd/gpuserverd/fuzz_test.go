package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzConfigFile: any config file either applies (and then every flag it names holds the value
// it gave, unless the command line set it) or is refused with the file's name and a line number.
func FuzzConfigFile(f *testing.F) {
	f.Add("id=gs1\nlisten=:7070\n# c\n")
	f.Add("colour=blue\n")
	f.Add("config=x\n")
	f.Add("=\n\n  backend = simulated  \n")
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, content string) {
		path := filepath.Join(dir, "gpuserverd.conf")
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		var s settings
		fs := newFlagSet(&s)
		if err := fs.Parse([]string{"--id", "from-flag"}); err != nil {
			t.Fatal(err)
		}
		err := applyConfig(fs, path)
		if err != nil {
			if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "line") {
				if !strings.Contains(err.Error(), "token too long") {
					t.Fatalf("error without file and line: %v", err)
				}
			}
			return
		}
		if s.id != "from-flag" {
			t.Fatalf("the file overrode the command line: id %q", s.id)
		}
		for _, line := range strings.Split(content, "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			k, v, _ := strings.Cut(line, "=")
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
			if k != "id" && fs.Lookup(k).Value.String() != v && !laterSets(content, line, k) {
				t.Fatalf("%s=%q applied as %q", k, v, fs.Lookup(k).Value.String())
			}
		}
	})
}

// laterSets reports whether a line after line sets k again (the last one wins).
func laterSets(content, line, k string) bool {
	_, rest, _ := strings.Cut(content, line)
	for _, l := range strings.Split(rest, "\n") {
		if kk, _, ok := strings.Cut(strings.TrimSpace(l), "="); ok && strings.TrimSpace(kk) == k {
			return true
		}
	}
	return false
}
