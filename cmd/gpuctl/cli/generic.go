package cli

import (
	"context"
	"iter"
	"strings"

	"github.com/spf13/cobra"

	"gpucloud/sdk"
)

// oneCmd is "USE ARG": one call with one argument (an id, a name) that gives one thing to print.
func oneCmd[T any](a *app, use, short, arg string, get func(*sdk.Client, context.Context, string) (T, error), cols []column[T]) *cobra.Command {
	return &cobra.Command{Use: use, Short: short, Args: exactArgs(1, arg),
		RunE: a.with(func(cmd *cobra.Command, cl *sdk.Client, args []string) error {
			v, err := get(cl, cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printOne(a.io.Out, a.output, v, cols)
		})}
}

// listCmd is "list": fetch every item and print them.
func listCmd[T any](a *app, short string, list func(*sdk.Client, context.Context) ([]T, error), cols []column[T]) *cobra.Command {
	return &cobra.Command{Use: "list", Short: short, Args: exactArgs(0, "no arguments"),
		RunE: a.with(func(cmd *cobra.Command, cl *sdk.Client, _ []string) error {
			items, err := list(cl, cmd.Context())
			if err != nil {
				return err
			}
			return printList(a.io.Out, a.output, items, cols)
		})}
}

// collected turns an SDK iterator method into a list function.
func collected[T any](seq func(*sdk.Client, context.Context) iter.Seq2[T, error]) func(*sdk.Client, context.Context) ([]T, error) {
	return func(c *sdk.Client, ctx context.Context) ([]T, error) { return sdk.Collect(seq(c, ctx)) }
}

// completeIDs completes the first argument with the ids of what list returns, each described
// by its name (shells show "id<TAB>name").
func completeIDs[T any](a *app, list func(*sdk.Client, context.Context) ([]T, error), id, name func(T) string) completer {
	return func(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		cl, err := a.api()
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		items, err := list(cl, cmd.Context())
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		out := make([]string, 0, len(items))
		for _, it := range items {
			out = append(out, id(it)+"\t"+name(it))
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

type completer = func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective)

// completeArg sets f as the argument completion of parent's subcommands whose argument is
// named arg ("INSTANCE_ID" in "stop INSTANCE_ID").
func completeArg(parent *cobra.Command, arg string, f completer) {
	for _, c := range parent.Commands() {
		if strings.HasSuffix(c.Use, " "+arg) {
			c.ValidArgsFunction = f
		}
	}
}
