package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"gpucloud/sdk"
)

// consoleCmd prints the tail of an instance's serial console; --follow keeps printing what
// the guest adds until interrupted.
func (a *app) consoleCmd() *cobra.Command {
	var follow, interactive bool
	var interval time.Duration
	cmd := &cobra.Command{Use: "console INSTANCE_ID", Short: "Show the tail of an instance's serial console, or attach to it (--interactive)", Args: exactArgs(1, "an instance id"),
		RunE: a.with(func(cmd *cobra.Command, cl *sdk.Client, args []string) error {
			id, err := instanceID(cmd.Context(), cl, args[0])
			if err != nil {
				return err
			}
			if interactive {
				if follow {
					return usagef(fmt.Errorf("--interactive and --follow: choose one"))
				}
				return a.interactiveConsole(cmd.Context(), cl, id)
			}
			log, err := cl.InstanceConsole(cmd.Context(), id)
			if err != nil {
				return err
			}
			if a.output != "table" {
				return printOne(a.io.Out, a.output, log, nil)
			}
			fmt.Fprint(a.io.Out, log.Log)
			if !follow {
				return nil
			}
			return followConsole(cmd.Context(), a.io.Out, cl, id, log.Log, interval)
		})}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new console output until interrupted")
	cmd.Flags().BoolVarP(&interactive, "interactive", "i", false, "attach the terminal to the serial console (raw mode; leave with "+escapeHelp+")")
	cmd.Flags().DurationVar(&interval, "interval", 2*time.Second, "how often --follow asks")
	return cmd
}

func followConsole(ctx context.Context, out io.Writer, cl *sdk.Client, id, seen string, every time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		log, err := cl.InstanceConsole(ctx, id)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		fmt.Fprint(out, newOutput(seen, log.Log))
		seen = log.Log
	}
}

// newOutput is what now adds to before: the tails are windows on a growing log, so the new part
// starts after the longest end of before that now begins with.
func newOutput(before, now string) string {
	for i := 0; i < len(before); i++ {
		if strings.HasPrefix(now, before[i:]) {
			return now[len(before)-i:]
		}
	}
	return now
}
