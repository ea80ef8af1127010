package cli

import (
	"context"
	"fmt"
	"iter"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"gpucloud/sdk"
)

var instanceCols = []column[sdk.Instance]{
	col("ID", func(i sdk.Instance) string { return i.ID }), col("NAME", func(i sdk.Instance) string { return i.Name }),
	col("STATE", func(i sdk.Instance) string { return i.State }), col("TIER", func(i sdk.Instance) string { return i.Tier }),
	col("GPUS", func(i sdk.Instance) string {
		if i.GPUCount == 0 {
			return "-"
		}
		return fmt.Sprintf("%dx%s", i.GPUCount, i.GPUModel)
	}),
	col("HOST", func(i sdk.Instance) string { return i.HostID }),
	col("ADDRESS", func(i sdk.Instance) string {
		if i.PrivateAddress == "" {
			return "-"
		}
		return i.PrivateAddress
	}),
	col("SSH", func(i sdk.Instance) string {
		if i.SSH == nil {
			return "-"
		}
		return i.SSH.Command
	}),
	col("WARNINGS", warnings),
}

// warnings marks the conditions of an instance that are not True, e.g.
// "HostReachable=False (2m0s ago)": its host or GPU server went silent and its state may be stale.
func warnings(i sdk.Instance) string {
	var out []string
	for _, c := range i.Unhealthy() {
		w := c.Type + "=" + c.Status
		if c.Since != nil {
			w += " (" + ago(c.Since) + ")"
		}
		out = append(out, w)
	}
	return dash(strings.Join(out, ", "))
}

func (a *app) instancesCmd() *cobra.Command {
	c := &cobra.Command{Use: "instances", Aliases: []string{"instance", "vm"}, Short: "Instances (VMs)"}
	var all bool
	var f sdk.InstanceFilter
	list := &cobra.Command{Use: "list", Short: "List instances", Args: exactArgs(0, "no arguments"),
		RunE: a.with(func(cmd *cobra.Command, cl *sdk.Client, _ []string) error {
			f.IncludeDeleted = all
			out, err := sdk.Collect(cl.Instances(cmd.Context(), f))
			if err != nil {
				return err
			}
			return printList(a.io.Out, a.output, out, instanceCols)
		})}
	list.Flags().BoolVar(&all, "all", false, "include deleted instances")
	list.Flags().StringSliceVar(&f.States, "state", nil, "only instances in these states (comma-separated or repeated)")
	list.Flags().StringVar(&f.HostID, "host", "", "only instances on this host (id)")
	list.Flags().StringVar(&f.GPUServerID, "gpu-server", "", "only instances with GPUs on this GPU server (id)")
	list.Flags().StringSliceVar(&f.Conditions, "condition", nil,
		"only live instances with these conditions, TYPE=STATUS (e.g. HostReachable=False; comma-separated or repeated; all must hold)")
	c.AddCommand(list)
	c.AddCommand(a.consoleCmd())
	c.AddCommand(oneCmd(a, "get INSTANCE", "Show an instance (id or name)", "an instance id or name", byInstance((*sdk.Client).GetInstance), instanceCols))
	c.AddCommand(&cobra.Command{Use: "events INSTANCE_ID", Short: "Show an instance's state transitions", Args: exactArgs(1, "an instance id"),
		RunE: a.with(func(cmd *cobra.Command, cl *sdk.Client, args []string) error {
			evs, err := byInstance((*sdk.Client).InstanceEvents)(cl, cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printList(a.io.Out, a.output, evs, []column[sdk.Event]{
				col("AT", func(e sdk.Event) string { return e.At.Format("2006-01-02T15:04:05Z07:00") }),
				col("FROM", func(e sdk.Event) string { return dash(e.From) }), col("TO", func(e sdk.Event) string { return e.To }),
				col("ACTOR", func(e sdk.Event) string { return e.Actor }), col("REASON", func(e sdk.Event) string { return dash(e.Reason) })})
		})})

	var req sdk.CreateInstanceRequest
	var cw waitFlags
	var userDataFile string
	create := &cobra.Command{Use: "create NAME", Short: "Create an instance", Args: exactArgs(1, "an instance name"),
		RunE: a.with(func(cmd *cobra.Command, cl *sdk.Client, args []string) error {
			req.Name = args[0]
			var err error
			if req.InstanceTypeID, err = instanceTypeID(cmd.Context(), cl, req.InstanceTypeID); err != nil {
				return err
			}
			if userDataFile != "" {
				b, err := os.ReadFile(userDataFile)
				if err != nil {
					return usagef(fmt.Errorf("--user-data-file: %w", err))
				}
				req.UserData = string(b)
			}
			i, err := cl.CreateInstance(cmd.Context(), req)
			if err != nil {
				return err
			}
			return a.finish(cmd.Context(), cl, i, cw, sdk.StateRunning)
		})}
	create.Flags().StringVar(&req.InstanceTypeID, "type", "", "instance type id or name (gpuctl instance-types list)")
	create.Flags().StringVar(&req.Image, "image", "", "image name")
	create.Flags().StringVar(&req.SSHKey, "ssh-key", "", "OpenSSH public key for the guest")
	create.Flags().StringSliceVar(&req.SSHKeyIDs, "ssh-key-id", nil, "id of one of your SSH keys (gpuctl ssh-keys list); repeatable")
	create.Flags().IntSliceVar(&req.ForwardPorts, "forward-port", nil, "guest TCP port to reach from outside besides 22 (up to 4); repeatable")
	create.Flags().StringVar(&userDataFile, "user-data-file", "", "cloud-init user-data: #cloud-config YAML or a #! script, at most 16 KiB")
	_ = create.MarkFlagRequired("type")
	_ = create.MarkFlagRequired("image")
	cw.add(create, "instance")
	c.AddCommand(create)

	actions := []struct {
		name, short, target string
		do                  func(*sdk.Client, context.Context, string) (sdk.Instance, error)
	}{
		{"start", "Start a stopped instance", sdk.StateRunning, (*sdk.Client).StartInstance},
		{"stop", "Stop an instance", sdk.StateStopped, (*sdk.Client).StopInstance},
		{"reboot", "Reboot a running instance", sdk.StateRunning, (*sdk.Client).RebootInstance},
		{"delete", "Delete an instance", sdk.StateDeleted, (*sdk.Client).DeleteInstance},
	}
	for _, act := range actions {
		var w waitFlags
		cmd := &cobra.Command{Use: act.name + " INSTANCE_ID", Short: act.short, Args: exactArgs(1, "an instance id"),
			RunE: a.with(func(cmd *cobra.Command, cl *sdk.Client, args []string) error {
				i, err := byInstance(act.do)(cl, cmd.Context(), args[0])
				if err != nil {
					return err
				}
				return a.finish(cmd.Context(), cl, i, w, act.target)
			})}
		w.add(cmd, "instance")
		c.AddCommand(cmd)
	}
	completeArg(c, "INSTANCE_ID", completeIDs(a, collected(func(cl *sdk.Client, ctx context.Context) iter.Seq2[sdk.Instance, error] {
		return cl.Instances(ctx, sdk.InstanceFilter{}) // live instances: nothing to do with deleted ones
	}),
		func(i sdk.Instance) string { return i.ID }, func(i sdk.Instance) string { return i.Name + " (" + i.State + ")" }))
	return c
}

// finish prints the instance, after waiting for a state if --wait was given.
func (a *app) finish(ctx context.Context, cl *sdk.Client, i sdk.Instance, w waitFlags, natural string) error {
	if w.state != "" {
		target := w.state
		if target == "auto" {
			target = natural
		}
		ctx, cancel := context.WithTimeout(ctx, w.timeout)
		defer cancel()
		last := i.State
		fmt.Fprintf(a.io.Err, "waiting for %s to be %s (now %s)\n", i.ID, target, last)
		var err error
		i, err = cl.WaitInstance(ctx, i.ID, w.interval, func(now sdk.Instance) {
			if now.State != last {
				fmt.Fprintf(a.io.Err, "%s: %s -> %s\n", now.ID, last, now.State)
				last = now.State
			}
		}, target)
		if err != nil {
			return err
		}
	}
	return printOne(a.io.Out, a.output, i, instanceCols)
}
