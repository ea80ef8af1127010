package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"gopkg.in/yaml.v3"
)

// Profile is one API endpoint with the key to use there.
type Profile struct {
	Endpoint string `yaml:"endpoint"`
	APIKey   string `yaml:"api_key"`
}

// Config is the file $XDG_CONFIG_HOME/gpucloud/config.yaml (os.UserConfigDir).
type Config struct {
	Current  string             `yaml:"current_profile"`
	Profiles map[string]Profile `yaml:"profiles"`
}

// DefaultConfigPath is where the configuration lives unless --config says otherwise.
func DefaultConfigPath(getenv func(string) string) (string, error) {
	// os.UserConfigDir reads the real environment; honour an injected XDG_CONFIG_HOME first.
	if d := getenv("XDG_CONFIG_HOME"); d != "" {
		return filepath.Join(d, "gpucloud", "config.yaml"), nil
	}
	d, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("find the config folder: %w", err)
	}
	return filepath.Join(d, "gpucloud", "config.yaml"), nil
}

// LoadConfig reads path; a missing file is an empty configuration.
func LoadConfig(path string) (*Config, error) {
	c := &Config{Profiles: map[string]Profile{}}
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	if err := yaml.Unmarshal(raw, c); err != nil {
		return nil, usagef(fmt.Errorf("config %s: %w", path, err))
	}
	if c.Profiles == nil {
		c.Profiles = map[string]Profile{}
	}
	return c, nil
}

// Save writes the configuration readable by its owner only (it holds API keys).
func (c *Config) Save(path string) error {
	raw, err := yaml.Marshal(c)
	if err != nil {
		return fmt.Errorf("encode config: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("create config folder: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, raw, 0o600); err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	return nil
}

// Names lists the profiles in order.
func (c *Config) Names() []string {
	var out []string
	for n := range c.Profiles {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
