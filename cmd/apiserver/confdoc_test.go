package main

import (
	"context"
	"strings"
	"testing"

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
	flagdoc.CheckSection(t, "apiserver", b.String())
}
