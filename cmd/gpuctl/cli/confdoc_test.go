package cli

import (
	"testing"

	"gpucloud/internal/flagdoc"
)

// gpuctl reads its environment variables when a command runs (flags beat the environment,
// which beats the profile), so they are not flag defaults; commands_test.go checks them.
func TestConfigurationDoc(t *testing.T) {
	root := (&app{}).root()
	flagdoc.CheckSection(t, "gpuctl", flagdoc.Table(flagdoc.PFlags(root.PersistentFlags())))
}
