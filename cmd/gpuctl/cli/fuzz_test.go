package cli

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoadConfig: any config file either loads (with a usable profile map) or fails with a
// usage error naming the file; it never panics.
func FuzzLoadConfig(f *testing.F) {
	f.Add([]byte("current_profile: ops\nprofiles:\n  ops:\n    endpoint: http://x\n    api_key: k\n"))
	f.Add([]byte("profiles: [oops"))
	f.Add([]byte("profiles: ~\n"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, raw []byte) {
		path := filepath.Join(dir, "config.yaml")
		if err := os.WriteFile(path, raw, 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := LoadConfig(path)
		if err != nil {
			if ExitCode(err) != ExitUsage {
				t.Fatalf("error %v has exit %d", err, ExitCode(err))
			}
			return
		}
		if c.Profiles == nil {
			t.Fatal("nil profile map")
		}
		_ = c.Names()
	})
}
