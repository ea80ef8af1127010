package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"gpucloud/sdk"
)

var hostCols = []column[sdk.Host]{
	col("ID", func(h sdk.Host) string { return h.ID }), col("NAME", func(h sdk.Host) string { return h.Name }),
	col("STATUS", func(h sdk.Host) string { return h.Status }), col("SCHED", func(h sdk.Host) string { return sched(h.Cordoned, h.Draining) }),
	col("VCPUS", func(h sdk.Host) string { return fmt.Sprintf("%d/%d", h.UsedVCPUs, h.VCPUs) }),
	col("MEMORY", func(h sdk.Host) string { return fmt.Sprintf("%d/%dMiB", h.UsedMemoryMiB, h.MemoryMiB) }),
	col("HEARTBEAT", func(h sdk.Host) string { return ago(h.LastHeartbeatAt) }),
}

var gpuServerCols = []column[sdk.GPUServer]{
	col("ID", func(g sdk.GPUServer) string { return g.ID }), col("NAME", func(g sdk.GPUServer) string { return g.Name }),
	col("STATUS", func(g sdk.GPUServer) string { return g.Status }), col("SCHED", func(g sdk.GPUServer) string { return sched(g.Cordoned, g.Draining) }),
	col("ENDPOINT", func(g sdk.GPUServer) string { return dash(g.Endpoint) }), col("GPUS", func(g sdk.GPUServer) string { return itoa(len(g.GPUs)) }),
	col("SESSIONS", func(g sdk.GPUServer) string { return itoa(g.ActiveSessions) }),
	col("HEARTBEAT", func(g sdk.GPUServer) string { return ago(g.LastHeartbeatAt) }),
}

var gpuCols = []column[sdk.GPU]{
	col("INDEX", func(g sdk.GPU) string { return itoa(g.Index) }), col("UUID", func(g sdk.GPU) string { return g.UUID }),
	col("NAME", func(g sdk.GPU) string { return g.Name }),
	col("RESERVED", func(g sdk.GPU) string { return gib(g.ReservedBytes) + "/" + gib(g.MemoryBytes) }),
	col("HEALTHY", func(g sdk.GPU) string { return yesno(g.Healthy) }),
}

func sched(cordoned, draining bool) string {
	switch {
	case draining:
		return "draining"
	case cordoned:
		return "cordoned"
	}
	return "schedulable"
}

var daemonCols = []column[sdk.NewDaemon]{
	col("ID", func(d sdk.NewDaemon) string { return d.ID }), col("NAME", func(d sdk.NewDaemon) string { return d.Name }),
	col("CREDENTIAL (SHOWN ONCE)", func(d sdk.NewDaemon) string { return d.Credential }),
}

// fleetKind is what differs between the hosts and gpu-servers command groups.
type fleetKind[T any] struct {
	use, noun string
	cols      []column[T]
	create    func(*sdk.Client, context.Context, string) (sdk.NewDaemon, error)
	list      func(*sdk.Client, context.Context) ([]T, error)
	get       func(*sdk.Client, context.Context, string) (T, error)
	actions   map[string]func(*sdk.Client, context.Context, string) (T, error)
	del       func(*sdk.Client, context.Context, string) error
	drain     func(*sdk.Client, context.Context, string, time.Duration, func(sdk.DrainProgress)) error
	id, name  func(T) string // for shell completion
}

func fleetCmd[T any](a *app, k fleetKind[T]) *cobra.Command {
	c := &cobra.Command{Use: k.use, Short: strings.ToUpper(k.noun[:1]) + k.noun[1:] + "s (operator)"}
	c.AddCommand(listCmd(a, "List "+k.noun+"s", k.list, k.cols))
	show := oneCmd(a, "show ID", "Show a "+k.noun, "an id", k.get, k.cols)
	show.Aliases = []string{"get"}
	c.AddCommand(show)
	c.AddCommand(oneCmd(a, "create NAME", "Register a "+k.noun+"; prints its credential once", "a name", k.create, daemonCols))
	for name, act := range k.actions {
		c.AddCommand(oneCmd(a, name+" ID", strings.ToUpper(name[:1])+name[1:]+" a "+k.noun, "an id", act, k.cols))
	}
	c.AddCommand(&cobra.Command{Use: "delete ID", Short: "Remove a " + k.noun + " without instances", Args: exactArgs(1, "an id"),
		RunE: a.with(func(cmd *cobra.Command, cl *sdk.Client, args []string) error {
			if err := k.del(cl, cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(a.io.Out, "%s %s deleted\n", k.noun, args[0])
			return nil
		})})
	var timeout, interval time.Duration
	drain := &cobra.Command{Use: "drain ID", Short: "Cordon a " + k.noun + " and wait until no instance remains on it",
		Long: "Cordons the " + k.noun + ", marks it draining and waits, showing progress, until every instance on it is deleted.\n" +
			"The apiserver does not move instances: their owners (or operators) delete them.",
		Args: exactArgs(1, "an id"),
		RunE: a.with(func(cmd *cobra.Command, cl *sdk.Client, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			last := -1
			err := k.drain(cl, ctx, args[0], interval, func(p sdk.DrainProgress) {
				if len(p.Remaining) == last {
					return
				}
				last = len(p.Remaining)
				fmt.Fprintf(a.io.Err, "[%s] %s %s: %d instances remain", p.Elapsed.Round(time.Second), k.noun, args[0], last)
				for i, inst := range p.Remaining {
					if i == 5 {
						fmt.Fprintf(a.io.Err, " …")
						break
					}
					fmt.Fprintf(a.io.Err, " %s(%s)", inst.Name, inst.State)
				}
				fmt.Fprintln(a.io.Err)
			})
			if err != nil {
				return err
			}
			v, err := k.get(cl, cmd.Context(), args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(a.io.Err, "%s %s is drained\n", k.noun, args[0])
			return printOne(a.io.Out, a.output, v, k.cols)
		})}
	drain.Flags().DurationVar(&timeout, "timeout", time.Hour, "give up after this long (exit 7)")
	drain.Flags().DurationVar(&interval, "poll-interval", 2*time.Second, "how often to look")
	c.AddCommand(drain)
	completeArg(c, "ID", completeIDs(a, k.list, k.id, k.name))
	return c
}

func (a *app) hostsCmd() *cobra.Command {
	c := fleetCmd(a, fleetKind[sdk.Host]{
		use: "hosts", noun: "host", cols: hostCols,
		create: (*sdk.Client).CreateHost,
		list:   collected((*sdk.Client).Hosts),
		get:    (*sdk.Client).GetHost,
		actions: map[string]func(*sdk.Client, context.Context, string) (sdk.Host, error){
			"cordon": (*sdk.Client).CordonHost, "uncordon": (*sdk.Client).UncordonHost},
		del:   (*sdk.Client).DeleteHost,
		drain: (*sdk.Client).DrainHost,
		id:    func(h sdk.Host) string { return h.ID },
		name:  func(h sdk.Host) string { return h.Name },
	})
	withMoveDrain(a, c, hostMoveDrain()) // cmd_drainmoves.go
	return c
}

func (a *app) gpuServersCmd() *cobra.Command {
	c := fleetCmd(a, fleetKind[sdk.GPUServer]{
		use: "gpu-servers", noun: "GPU server", cols: gpuServerCols,
		create: (*sdk.Client).CreateGPUServer,
		list:   collected((*sdk.Client).GPUServers),
		get:    (*sdk.Client).GetGPUServer,
		actions: map[string]func(*sdk.Client, context.Context, string) (sdk.GPUServer, error){
			"cordon": (*sdk.Client).CordonGPUServer, "uncordon": (*sdk.Client).UncordonGPUServer},
		del:   (*sdk.Client).DeleteGPUServer,
		drain: (*sdk.Client).DrainGPUServer,
		id:    func(g sdk.GPUServer) string { return g.ID },
		name:  func(g sdk.GPUServer) string { return g.Name },
	})
	withMoveDrain(a, c, gpuServerMoveDrain) // cmd_drainmoves.go
	c.AddCommand(&cobra.Command{Use: "gpus ID", Short: "List a GPU server's GPUs", Args: exactArgs(1, "a GPU server id"),
		RunE: a.with(func(cmd *cobra.Command, cl *sdk.Client, args []string) error {
			g, err := cl.GetGPUServer(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printList(a.io.Out, a.output, g.GPUs, gpuCols)
		})})
	c.AddCommand(&cobra.Command{Use: "sessions ID", Short: "List the instances holding GPU sessions on a GPU server",
		Long: "Each live instance with GPUs on this server holds a session there. The API has no per-session\n" +
			"resource yet, so this lists those instances (ACTIVE SESSIONS in 'show' is gpuserverd's own count).",
		Args: exactArgs(1, "a GPU server id"),
		RunE: a.with(func(cmd *cobra.Command, cl *sdk.Client, args []string) error {
			if _, err := cl.GetGPUServer(cmd.Context(), args[0]); err != nil {
				return err
			}
			out, err := sdk.Collect(cl.Instances(cmd.Context(), sdk.InstanceFilter{GPUServerID: args[0]}))
			if err != nil {
				return err
			}
			return printList(a.io.Out, a.output, out, instanceCols)
		})})
	if show, _, err := c.Find([]string{"show"}); err == nil {
		completeArg(c, "ID", show.ValidArgsFunction) // gpus and sessions too
	}
	return c
}

func (a *app) auditCmd() *cobra.Command {
	var limit int
	cmd := &cobra.Command{Use: "audit", Short: "The audit log, newest last", Args: exactArgs(0, "no arguments"),
		RunE: a.with(func(cmd *cobra.Command, cl *sdk.Client, _ []string) error {
			var out []sdk.AuditEntry
			for e, err := range cl.AuditEvents(cmd.Context()) {
				if err != nil {
					return err
				}
				out = append(out, e)
			}
			if limit > 0 && len(out) > limit {
				out = out[len(out)-limit:]
			}
			return printList(a.io.Out, a.output, out, []column[sdk.AuditEntry]{
				col("AT", func(e sdk.AuditEntry) string { return e.At.Format(time.RFC3339) }),
				col("ACTOR", func(e sdk.AuditEntry) string { return e.ActorRole }), col("ACTION", func(e sdk.AuditEntry) string { return e.Action }),
				col("RESOURCE", func(e sdk.AuditEntry) string { return e.ResourceType + "/" + e.ResourceID }),
				col("TENANT", func(e sdk.AuditEntry) string { return dash(e.TenantID) })})
		})}
	cmd.Flags().IntVar(&limit, "last", 0, "only the last N entries")
	return cmd
}
