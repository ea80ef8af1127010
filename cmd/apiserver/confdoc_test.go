package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"path/filepath"
	"strings"
	"testing"

	"gpucloud/apiserver/app"

	"gpucloud/internal/flagdoc"
)

func apiserverSettings() map[string][]flagdoc.Setting {
	root := newRoot(context.Background())
	out := map[string][]flagdoc.Setting{"apiserver": flagdoc.PFlags(root.PersistentFlags())}
	for _, c := range root.Commands() {
		out[c.Name()] = flagdoc.PFlags(c.Flags())
	}
	return out
}

func TestConfigurationDoc(t *testing.T) {
	flagdoc.CheckEnvBinds(t, func() []flagdoc.Setting {
		var all []flagdoc.Setting
		for _, s := range apiserverSettings() {
			all = append(all, s...)
		}
		return all
	})
	s := apiserverSettings()
	var b strings.Builder
	b.WriteString("Every subcommand (`serve`, `migrate`, `bootstrap`):\n\n" + flagdoc.Table(s["apiserver"]))
	b.WriteString("\n`apiserver serve`: the REST API and the console.\n\n" + flagdoc.Table(s["serve"]))
	b.WriteString("\n`apiserver bootstrap`: creates a platform user and prints its API key once.\n\n" + flagdoc.Table(s["bootstrap"]))
	b.WriteString("\n`apiserver token-public-key`: prints the public half of the token key, base64, for gpuserverd's `--public-key`.\n\n" + flagdoc.Table(s["token-public-key"]))
	flagdoc.CheckSection(t, "apiserver", b.String())
}

func TestTokenPublicKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token.key")
	key, err := app.LoadOrCreateTokenKey(path)
	if err != nil {
		t.Fatal(err)
	}
	root := newRoot(context.Background())
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"token-public-key", "--token-key", path})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	want := base64.StdEncoding.EncodeToString(key.Public().(ed25519.PublicKey)) + "\n"
	if out.String() != want {
		t.Fatalf("printed %q, want %q", out.String(), want)
	}
	root = newRoot(context.Background())
	root.SetArgs([]string{"token-public-key", "--token-key", filepath.Join(t.TempDir(), "missing")})
	root.SetErr(new(bytes.Buffer))
	if err := root.Execute(); err == nil {
		t.Fatal("a missing key file printed a key")
	}
}
