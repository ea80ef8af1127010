package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"gpucloud/sdk"
)

// moveCols show a drain's moves.
var moveCols = []column[sdk.GPUServerMove]{
	col("INSTANCE", func(m sdk.GPUServerMove) string { return m.InstanceID }),
	col("STATE", func(m sdk.GPUServerMove) string { return m.State }),
	col("TARGET", func(m sdk.GPUServerMove) string { return m.TargetID }),
	col("SESSIONS", func(m sdk.GPUServerMove) string { return fmt.Sprint(m.SessionsMoved) }),
	col("COPIED", func(m sdk.GPUServerMove) string { return fmt.Sprintf("%d/%d", m.BytesCopied, m.BytesTotal) }),
	col("PAUSE MS", func(m sdk.GPUServerMove) string { return fmt.Sprintf("%.1f", m.PauseMs) }),
	col("REASON", func(m sdk.GPUServerMove) string { return m.Reason }),
}

// withMoveDrain gives `gpu-servers drain` its --move and --wait flags (a drain that moves work)
// and adds `gpu-servers moves ID`. Without --move the drain is the fleet's: it waits until no
// instance remains.
func (a *app) withMoveDrain(c *cobra.Command) {
	var drain *cobra.Command
	for _, sub := range c.Commands() {
		if sub.Name() == "drain" {
			drain = sub
		}
	}
	var move, wait bool
	plain := drain.RunE
	drain.Long += "\n\nWith --move the apiserver moves each instance's GPU sessions, running, to another GPU server with\n" +
		"room (live migration); an instance with none is named with the reason. The plan is printed at once;\n" +
		"--wait also waits, showing progress, until no move is open, and fails (exit 1) if any instance stays."
	drain.Flags().BoolVar(&move, "move", false, "move the instances' sessions to other GPU servers")
	drain.Flags().BoolVar(&wait, "wait", false, "with --move: wait until every move has finished")
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
				d, err := cl.StartMoveDrainGPUServer(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				return printList(a.io.Out, a.output, d.Moves, moveCols)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			start, last := time.Now(), ""
			d, err := cl.MoveDrainGPUServer(ctx, args[0], interval, func(d sdk.GPUServerDrain) {
				line := progressLine(d)
				if line != last {
					fmt.Fprintf(a.io.Err, "[%s] GPU server %s: %s\n", time.Since(start).Round(time.Second), args[0], line)
					last = line
				}
			})
			if err != nil {
				return err
			}
			if err := printList(a.io.Out, a.output, d.Moves, moveCols); err != nil {
				return err
			}
			if d.Remaining > 0 {
				return fmt.Errorf("%d instance(s) stay on GPU server %s (see REASON)", d.Remaining, args[0])
			}
			fmt.Fprintf(a.io.Err, "GPU server %s is drained: its work moved\n", args[0])
			return nil
		})(cmd, args)
	}
	c.AddCommand(&cobra.Command{Use: "moves ID", Short: "Show a GPU server's drain: each instance's move", Args: exactArgs(1, "a GPU server id"),
		RunE: a.with(func(cmd *cobra.Command, cl *sdk.Client, args []string) error {
			d, err := cl.GetGPUServerDrain(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printList(a.io.Out, a.output, d.Moves, moveCols)
		})})
}

// progressLine sums a drain up: moves by state, and what is copied of the moves under way.
func progressLine(d sdk.GPUServerDrain) string {
	var parts []string
	for _, s := range []string{"pending", "moving", "done", "failed", "unplaced"} {
		if n := d.Counts[s]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, s))
		}
	}
	var copied, total int64
	for _, m := range d.Moves {
		if m.State == "moving" {
			copied, total = copied+m.BytesCopied, total+m.BytesTotal
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
