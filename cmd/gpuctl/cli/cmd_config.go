package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

func (a *app) configCmd() *cobra.Command {
	c := &cobra.Command{Use: "config", Short: "Manage profiles (endpoint and API key) in the config file"}
	var endpoint, key string
	var use bool
	set := &cobra.Command{Use: "set-profile NAME", Short: "Create or change a profile", Args: exactArgs(1, "a profile name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, cfg, err := a.loadConfig()
			if err != nil {
				return err
			}
			p := cfg.Profiles[args[0]]
			if endpoint != "" {
				p.Endpoint = endpoint
			}
			if key != "" {
				p.APIKey = key
			}
			if p.Endpoint == "" {
				return usagef(fmt.Errorf("profile %q needs --endpoint", args[0]))
			}
			cfg.Profiles[args[0]] = p
			if use || cfg.Current == "" {
				cfg.Current = args[0]
			}
			if err := cfg.Save(path); err != nil {
				return err
			}
			fmt.Fprintf(a.io.Out, "profile %s saved in %s\n", args[0], path)
			return nil
		}}
	set.Flags().StringVar(&endpoint, "endpoint", "", "API endpoint, e.g. https://api.example.com")
	set.Flags().StringVar(&key, "api-key", "", "API key")
	set.Flags().BoolVar(&use, "use", false, "make it the current profile")
	useCmd := &cobra.Command{Use: "use NAME", Short: "Make a profile the current one", Args: exactArgs(1, "a profile name"),
		ValidArgsFunction: a.completeProfiles,
		RunE: func(cmd *cobra.Command, args []string) error {
			path, cfg, err := a.loadConfig()
			if err != nil {
				return err
			}
			if _, ok := cfg.Profiles[args[0]]; !ok {
				return usagef(fmt.Errorf("no profile %q", args[0]))
			}
			cfg.Current = args[0]
			return cfg.Save(path)
		}}
	view := &cobra.Command{Use: "view", Short: "Show the profiles (keys masked)", Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, cfg, err := a.loadConfig()
			if err != nil {
				return err
			}
			type row struct {
				Name     string `json:"name"`
				Current  bool   `json:"current"`
				Endpoint string `json:"endpoint"`
				APIKey   string `json:"api_key"`
			}
			var rows []row
			for _, n := range cfg.Names() {
				p := cfg.Profiles[n]
				rows = append(rows, row{n, n == cfg.Current, p.Endpoint, mask(p.APIKey)})
			}
			return printList(a.io.Out, a.output, rows, []column[row]{
				col("NAME", func(r row) string { return r.Name }), col("CURRENT", func(r row) string { return yesno(r.Current) }),
				col("ENDPOINT", func(r row) string { return r.Endpoint }), col("API KEY", func(r row) string { return r.APIKey })})
		}}
	c.AddCommand(set, useCmd, view)
	return c
}

func (a *app) loadConfig() (string, *Config, error) {
	a.ran = true
	path, err := a.cfgPath()
	if err != nil {
		return "", nil, err
	}
	cfg, err := LoadConfig(path)
	return path, cfg, err
}

func (a *app) completeProfiles(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	_, cfg, err := a.loadConfig()
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	return cfg.Names(), cobra.ShellCompDirectiveNoFileComp
}

func mask(k string) string {
	if len(k) <= 8 {
		return "****"
	}
	return k[:8] + "…"
}
