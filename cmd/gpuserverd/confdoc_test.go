package main

import (
	"testing"

	"gpucloud/internal/flagdoc"
)

func TestConfigurationDoc(t *testing.T) {
	build := func() []flagdoc.Setting { return flagdoc.Std(newFlagSet(new(settings))) }
	flagdoc.CheckEnvBinds(t, build)
	flagdoc.CheckSection(t, "gpuserverd", flagdoc.Table(build()))
}
