// Package flagdoc renders the commands' flag sets as the tables of docs/configuration.md, so the
// configuration reference is generated from the code and a test fails when it is stale.
//
// A flag's environment variable is the one its usage names, as "(env NAME)" or "($NAME)"; the
// commands' tests check with CheckEnvBinds that setting it really changes the flag's default.
package flagdoc

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// Setting is one flag.
type Setting struct {
	Flag, Type, Env, Default, Usage string
}

var envRE = regexp.MustCompile(`\s*\((?:env \$?|\$)([A-Z][A-Z0-9_]+)\)`)

func setting(name, typ, def, usage string) Setting {
	s := Setting{Flag: "--" + name, Type: typ, Default: def, Usage: usage}
	if m := envRE.FindStringSubmatch(usage); m != nil {
		s.Env = m[1]
		s.Usage = strings.TrimSpace(envRE.ReplaceAllString(usage, ""))
	}
	return s
}

// Std lists a standard library flag set's flags in name order.
func Std(fs *flag.FlagSet) []Setting {
	var out []Setting
	fs.VisitAll(func(f *flag.Flag) {
		typ, _ := flag.UnquoteUsage(f)
		if typ == "" {
			typ = "bool"
		}
		out = append(out, setting(f.Name, typ, f.DefValue, f.Usage))
	})
	return out
}

// PFlags lists a pflag (cobra) flag set's flags in name order, leaving out --help.
func PFlags(fs *pflag.FlagSet) []Setting {
	var out []Setting
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name == "help" || f.Hidden {
			return
		}
		out = append(out, setting(f.Name, f.Value.Type(), f.DefValue, f.Usage))
	})
	return out
}

// Table renders settings as a Markdown table.
func Table(settings []Setting) string {
	var b strings.Builder
	b.WriteString("| Flag | Environment | Default | Meaning |\n|---|---|---|---|\n")
	for _, s := range settings {
		env, def := "—", "—"
		if s.Env != "" {
			env = "`" + s.Env + "`"
		}
		if s.Default != "" {
			def = "`" + s.Default + "`"
		}
		flagCol := "`" + s.Flag + "`"
		if s.Type != "bool" {
			flagCol = "`" + s.Flag + " " + s.Type + "`"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", flagCol, env, def, strings.ReplaceAll(s.Usage, "|", `\|`))
	}
	return b.String()
}

// EnvNames lists the settings' environment variables.
func EnvNames(settings []Setting) []string {
	var out []string
	for _, s := range settings {
		if s.Env != "" {
			out = append(out, s.Env)
		}
	}
	return out
}

// Unsetenv removes the variables for the rest of the test (and restores them after), so
// defaults that read the environment show their built-in values.
func Unsetenv(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		t.Setenv(n, "")
		os.Unsetenv(n)
	}
}

// CheckEnvBinds fails t for every setting whose environment variable does not change its
// default: build must define the flags afresh (reading the environment) and list them.
func CheckEnvBinds(t *testing.T, build func() []Setting) {
	t.Helper()
	base := build()
	Unsetenv(t, EnvNames(base)...)
	base = build()
	for _, s := range base {
		if s.Env == "" {
			continue
		}
		v := "from-the-environment"
		if s.Default == "false" {
			v = "true"
		}
		t.Setenv(s.Env, v)
		for _, after := range build() {
			if after.Flag == s.Flag && after.Default == s.Default {
				t.Errorf("%s names %s, but setting it leaves the default %q", s.Flag, s.Env, s.Default)
			}
		}
		os.Unsetenv(s.Env)
	}
}

// DocPath is docs/configuration.md, found from a package folder inside the module.
func DocPath(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "docs", "configuration.md")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's folder")
		}
		dir = parent
	}
}

// UpdateEnv set to 1 makes CheckSection rewrite the section instead of failing (go generate).
const UpdateEnv = "GPUCLOUD_UPDATE_DOCS"

// CheckSection fails t when the generated section name of docs/configuration.md differs from
// body; with $GPUCLOUD_UPDATE_DOCS=1 it rewrites the section instead.
func CheckSection(t *testing.T, name, body string) {
	t.Helper()
	path := DocPath(t)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	begin := "<!-- BEGIN GENERATED " + name + " (go generate ./cmd/...) -->\n"
	end := "<!-- END GENERATED " + name + " -->"
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		t.Fatalf("%s has no section %q: add the lines\n%s%s", path, name, begin, end)
	}
	if doc[i+len(begin):j] == body {
		return
	}
	if os.Getenv(UpdateEnv) == "1" {
		if err := os.WriteFile(path, []byte(doc[:i+len(begin)]+body+doc[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s: section %s is stale; run `go generate ./cmd/...`. Want:\n%s", path, name, body)
}

// Documented lists the environment variables docs/configuration.md names (in backquotes), for
// tests of files that set them (systemd environment files, Kubernetes manifests).
func Documented(t *testing.T) map[string]bool {
	t.Helper()
	doc, err := os.ReadFile(DocPath(t))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range docEnvRE.FindAllStringSubmatch(string(doc), -1) {
		out[m[1]] = true
	}
	return out
}

var docEnvRE = regexp.MustCompile("`([A-Z][A-Z0-9_]+)`")
