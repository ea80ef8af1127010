package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"gpucloud/sdk"
)

// moveCols show a GPU server drain's moves.
var moveCols = []column[sdk.GPUServerMove]{
	col("INSTANCE", func(m sdk.GPUServerMove) string { return m.InstanceID }),
	col("STATE", func(m sdk.GPUServerMove) string { return m.State }),
	col("TARGET", func(m sdk.GPUServerMove) string { return m.TargetID }),
	col("SESSIONS", func(m sdk.GPUServerMove) string { return fmt.Sprint(m.SessionsMoved) }),
	col("COPIED", func(m sdk.GPUServerMove) string { return fmt.Sprintf("%d/%d", m.BytesCopied, m.BytesTotal) }),
	col("PAUSE MS", func(m sdk.GPUServerMove) string { return fmt.Sprintf("%.1f", m.PauseMs) }),
	col("REASON", func(m sdk.GPUServerMove) string { return m.Reason }),
}

// hostMoveCols show a host drain's moves.
var hostMoveCols = []column[sdk.HostMove]{
	col("INSTANCE", func(m sdk.HostMove) string { return m.InstanceID }),
	col("NAME", func(m sdk.HostMove) string { return m.InstanceName }),
	col("STATE", func(m sdk.HostMove) string { return m.State }),
	col("MODE", func(m sdk.HostMove) string { return m.Mode }),
	col("TARGET", func(m sdk.HostMove) string { return m.TargetID }),
	col("COPIED", func(m sdk.HostMove) string { return fmt.Sprintf("%d/%d", m.BytesCopied, m.BytesTotal) }),
	col("REASON", func(m sdk.HostMove) string { return strings.TrimPrefix(m.Reason+"; "+m.Note, "; ") }),
}

// moveDrain is a drain that moves work, for one kind of daemon: D is its drain's status, M a move.
type moveDrain[D, M any] struct {
	noun, moved, help string
	cols              []column[M]
	flags             func(*pflag.FlagSet) // the kind's own flags (a host's --live)
	start             func(*sdk.Client, context.Context, string) (D, error)
	wait              func(*sdk.Client, context.Context, string, time.Duration, func(D)) (D, error)
	get               func(*sdk.Client, context.Context, string) (D, error)
	moves             func(D) []M
	remaining         func(D) int
	counts            func(D) map[string]int
	states            []string // in the order progress names them; the second is the one copying
	copied            func(M) (state string, copied, total int64)
}

// line sums a drain up: moves by state, and what is copied of the moves under way.
func (k moveDrain[D, M]) line(d D) string {
	var parts []string
	for _, s := range k.states {
		if n := k.counts(d)[s]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, s))
		}
	}
	var copied, total int64
	for _, m := range k.moves(d) {
		if st, c, t := k.copied(m); st == k.states[1] {
			copied, total = copied+c, total+t
		}
	}
	if total > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d bytes copied", copied, total))
	}
	if len(parts) == 0 {
		return "nothing to move"
	}
	return strings.Join(parts, ", ")
}

// withMoveDrain gives `<kind> drain` its --move and --wait flags (a drain that moves work) and
// adds `<kind> moves ID`. Without --move the drain is the fleet's: it waits until no instance
// remains.
func withMoveDrain[D, M any](a *app, c *cobra.Command, k moveDrain[D, M]) {
	var drain *cobra.Command
	for _, sub := range c.Commands() {
		if sub.Name() == "drain" {
			drain = sub
		}
	}
	var move, wait bool
	plain := drain.RunE
	drain.Long += "\n\n" + k.help + " The plan is printed at once;\n" +
		"--wait also waits, showing progress, until no move is open, and fails (exit 1) if any instance stays."
	drain.Flags().BoolVar(&move, "move", false, "move the instances to other "+k.noun+"s")
	drain.Flags().BoolVar(&wait, "wait", false, "with --move: wait until every move has finished")
	if k.flags != nil {
		k.flags(drain.Flags())
	}
	drain.RunE = func(cmd *cobra.Command, args []string) error {
		if !move {
			if wait {
				return usagef(fmt.Errorf("--wait goes with --move (a plain drain always waits)"))
			}
			return plain(cmd, args)
		}
		return a.with(func(cmd *cobra.Command, cl *sdk.Client, args []string) error {
			timeout, _ := cmd.Flags().GetDuration("timeout")
			interval, _ := cmd.Flags().GetDuration("poll-interval")
			if !wait {
				d, err := k.start(cl, cmd.Context(), args[0])
				if err != nil {
					return err
				}
				return printList(a.io.Out, a.output, k.moves(d), k.cols)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			start, last := time.Now(), ""
			d, err := k.wait(cl, ctx, args[0], interval, func(d D) {
				line := k.line(d)
				if line != last {
					fmt.Fprintf(a.io.Err, "[%s] %s %s: %s\n", time.Since(start).Round(time.Second), k.noun, args[0], line)
					last = line
				}
			})
			if err != nil {
				return err
			}
			if err := printList(a.io.Out, a.output, k.moves(d), k.cols); err != nil {
				return err
			}
			if n := k.remaining(d); n > 0 {
				return fmt.Errorf("%d instance(s) stay on %s %s (see REASON)", n, k.noun, args[0])
			}
			fmt.Fprintf(a.io.Err, "%s %s is drained: %s\n", k.noun, args[0], k.moved)
			return nil
		})(cmd, args)
	}
	c.AddCommand(&cobra.Command{Use: "moves ID", Short: "Show a " + k.noun + "'s drain: each instance's move", Args: exactArgs(1, "a "+k.noun+" id"),
		RunE: a.with(func(cmd *cobra.Command, cl *sdk.Client, args []string) error {
			d, err := k.get(cl, cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printList(a.io.Out, a.output, k.moves(d), k.cols)
		})})
}

// gpuServerMoveDrain moves GPU sessions, running, to other GPU servers.
var gpuServerMoveDrain = moveDrain[sdk.GPUServerDrain, sdk.GPUServerMove]{
	noun: "GPU server", moved: "its work moved", cols: moveCols,
	help: "With --move the apiserver moves each instance's GPU sessions, running, to another GPU server with\n" +
		"room (live migration); an instance with none is named with the reason.",
	start:     (*sdk.Client).StartMoveDrainGPUServer,
	wait:      (*sdk.Client).MoveDrainGPUServer,
	get:       (*sdk.Client).GetGPUServerDrain,
	moves:     func(d sdk.GPUServerDrain) []sdk.GPUServerMove { return d.Moves },
	remaining: func(d sdk.GPUServerDrain) int { return d.Remaining },
	counts:    func(d sdk.GPUServerDrain) map[string]int { return d.Counts },
	states:    []string{"pending", "moving", "done", "failed", "unplaced"},
	copied:    func(m sdk.GPUServerMove) (string, int64, int64) { return m.State, m.BytesCopied, m.BytesTotal },
}

// hostMoveDrain moves VMs to other hosts: restarted there, or live-migrated with --live.
func hostMoveDrain() moveDrain[sdk.HostDrain, sdk.HostMove] {
	var o sdk.HostDrainOptions
	return moveDrain[sdk.HostDrain, sdk.HostMove]{
		noun: "host", moved: "its VMs moved", cols: hostMoveCols,
		help: "With --move the apiserver moves each VM to another host with room: stopped here, its disks copied\n" +
			"to the target, started there with the same id, addresses and volumes (--live: libvirt live migration\n" +
			"where both hosts allow it; --fallback restarts the others). A VM with no room is named with the reason.",
		flags: func(fs *pflag.FlagSet) {
			fs.BoolVar(&o.Live, "live", false, "with --move: live-migrate the VMs through libvirt where both hosts allow it")
			fs.BoolVar(&o.Fallback, "fallback", false, "with --live: restart on the target a VM that cannot live-migrate")
		},
		start: func(cl *sdk.Client, ctx context.Context, id string) (sdk.HostDrain, error) {
			return cl.StartMoveDrainHost(ctx, id, o)
		},
		wait: func(cl *sdk.Client, ctx context.Context, id string, every time.Duration, p func(sdk.HostDrain)) (sdk.HostDrain, error) {
			return cl.MoveDrainHost(ctx, id, o, every, p)
		},
		get:       (*sdk.Client).GetHostDrain,
		moves:     func(d sdk.HostDrain) []sdk.HostMove { return d.Moves },
		remaining: func(d sdk.HostDrain) int { return d.Remaining },
		counts:    func(d sdk.HostDrain) map[string]int { return d.Counts },
		states:    []string{"pending", "copying", "done", "failed", "unplaced"},
		copied:    func(m sdk.HostMove) (string, int64, int64) { return m.State, m.BytesCopied, m.BytesTotal },
	}
}
