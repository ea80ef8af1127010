// Package cli is gpuctl's command tree. Run executes it with injected streams and environment,
// which is how the tests drive it in-process.
package cli

// docs/configuration.md is generated from the global flags.
//go:generate env GPUCLOUD_UPDATE_DOCS=1 go test -count=1 -run ^TestConfigurationDoc$ .

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"gpucloud/sdk"
)

// IO is what a run reads and writes besides its arguments.
type IO struct {
	// In is what interactive commands read (nil: standard input).
	In       io.Reader
	Out, Err io.Writer
	Getenv   func(string) string
	// Retry overrides the SDK's retry policy (tests make it quick).
	Retry sdk.RetryPolicy
}

// app is the state shared by the commands of one run.
type app struct {
	io                                 IO
	configPath, profile, endpoint, key string
	caFile                             string
	output                             string
	client                             *sdk.Client
	ran                                bool
}

// Run executes gpuctl with args and returns its exit code; errors are printed to io.Err.
func Run(ctx context.Context, args []string, io IO) int {
	a := &app{io: io}
	root := a.root()
	root.SetArgs(args)
	root.SetOut(io.Out)
	root.SetErr(io.Err)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	if !a.ran && !errors.As(err, new(usageError)) {
		// Cobra refused the command line before any command ran: unknown command, bad flag,
		// wrong number of arguments.
		err = usagef(err)
	}
	fmt.Fprintf(io.Err, "gpuctl: %v\n", err)
	return ExitCode(err)
}

func (a *app) root() *cobra.Command {
	root := &cobra.Command{
		Use:           "gpuctl",
		Short:         "Command line for gpucloud: tenants, instances, hosts, GPU servers, billing",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return checkFormat(a.output)
		},
	}
	pf := root.PersistentFlags()
	pf.StringVar(&a.configPath, "config", "", "config file (default $XDG_CONFIG_HOME/gpucloud/config.yaml)")
	pf.StringVar(&a.profile, "profile", "", "profile of the config file to use (env GPUCLOUD_PROFILE)")
	pf.StringVar(&a.endpoint, "endpoint", "", "API endpoint, overrides the profile (env GPUCLOUD_API_URL)")
	pf.StringVar(&a.key, "api-key", "", "API key, overrides the profile (env GPUCLOUD_API_KEY)")
	pf.StringVar(&a.caFile, "ca-file", "", "PEM CA certificates to trust for an https endpoint instead of the system roots (env GPUCLOUD_CA_FILE)")
	pf.StringVarP(&a.output, "output", "o", "table", "output format: table, json or yaml")
	_ = root.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{"table", "json", "yaml"}, cobra.ShellCompDirectiveNoFileComp
	})
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usagef(err) })
	root.AddCommand(a.configCmd(), a.meCmd(), a.tenantsCmd(), a.quotaCmd(), a.usersCmd(), a.keysCmd(),
		a.gpuModelsCmd(), a.tiersCmd(), a.instanceTypesCmd(), a.pricesCmd(), a.instancesCmd(),
		a.imagesCmd(), a.sshKeysCmd(), a.volumesCmd(),
		a.hostsCmd(), a.gpuServersCmd(), a.auditCmd(), a.reportCmd(), a.usageCmd(), a.invoicesCmd(), a.periodsCmd(),
		a.balanceCmd(), a.creditsCmd(), a.budgetCmd(), a.webhooksCmd())
	return root
}

func (a *app) getenv(k string) string {
	if a.io.Getenv == nil {
		return ""
	}
	return a.io.Getenv(k)
}

func (a *app) cfgPath() (string, error) {
	if a.configPath != "" {
		return a.configPath, nil
	}
	return DefaultConfigPath(a.getenv)
}

// api returns the SDK client: flags beat the environment, which beats the profile.
func (a *app) api() (*sdk.Client, error) {
	if a.client != nil {
		return a.client, nil
	}
	path, err := a.cfgPath()
	if err != nil {
		return nil, err
	}
	cfg, err := LoadConfig(path)
	if err != nil {
		return nil, err
	}
	name := first(a.profile, a.getenv("GPUCLOUD_PROFILE"), cfg.Current, "default")
	p, ok := cfg.Profiles[name]
	if !ok && (a.profile != "" || a.getenv("GPUCLOUD_PROFILE") != "") {
		return nil, usagef(fmt.Errorf("no profile %q in %s (have %s)", name, path, strings.Join(cfg.Names(), ", ")))
	}
	endpoint := first(a.endpoint, a.apiURLFromEnv(), p.Endpoint)
	key := first(a.key, a.getenv("GPUCLOUD_API_KEY"), p.APIKey)
	if endpoint == "" {
		return nil, usagef(fmt.Errorf("no endpoint: set --endpoint, GPUCLOUD_API_URL or a profile (gpuctl config set-profile)"))
	}
	if key == "" {
		return nil, usagef(fmt.Errorf("no API key: set --api-key, GPUCLOUD_API_KEY or a profile (gpuctl config set-profile)"))
	}
	c, err := sdk.New(endpoint, key, sdk.Options{Retry: a.io.Retry, UserAgent: "gpuctl", CAFile: first(a.caFile, a.getenv("GPUCLOUD_CA_FILE"))})
	if err != nil {
		return nil, usagef(err)
	}
	a.client = c
	return c, nil
}

func first(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// waitFlags are --wait and --timeout of commands that can wait.
type waitFlags struct {
	state    string
	timeout  time.Duration
	interval time.Duration
}

func (w *waitFlags) add(cmd *cobra.Command, what string) {
	cmd.Flags().StringVar(&w.state, "wait", "", "wait until the "+what+" reaches this state (bare --wait: the action's natural end state)")
	cmd.Flags().Lookup("wait").NoOptDefVal = "auto"
	cmd.Flags().DurationVar(&w.timeout, "timeout", 10*time.Minute, "give up waiting after this long (exit 7)")
	cmd.Flags().DurationVar(&w.interval, "poll-interval", 2*time.Second, "longest pause between polls while waiting (polls start at 100ms and double up to it)")
}

func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef(fmt.Errorf("%s takes %s", cmd.CommandPath(), names))
		}
		return nil
	}
}

// with builds a RunE that gets the SDK client first.
func (a *app) with(fn func(cmd *cobra.Command, c *sdk.Client, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		a.ran = true // from here on, errors are the command's, not the command line's
		c, err := a.api()
		if err != nil {
			return err
		}
		return fn(cmd, c, args)
	}
}

// apiURLFromEnv is GPUCLOUD_API_URL, or the older GPUCLOUD_ENDPOINT with a warning: to the guest
// library GPUCLOUD_ENDPOINT is gpuserverd's address, so one shell could not hold both meanings.
func (a *app) apiURLFromEnv() string {
	if v := a.getenv("GPUCLOUD_API_URL"); v != "" {
		return v
	}
	v := a.getenv("GPUCLOUD_ENDPOINT")
	if v != "" && a.io.Err != nil {
		fmt.Fprintln(a.io.Err, "gpuctl: GPUCLOUD_ENDPOINT is deprecated for the API URL (the guest library reads it as gpuserverd's address); use GPUCLOUD_API_URL")
	}
	return v
}
