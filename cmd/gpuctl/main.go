// Command gpuctl is the operators' and tenants' command line for gpucloud, built on the SDK.
// Exit codes are documented in docs/gpuctl.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"gpucloud/cmd/gpuctl/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], cli.IO{In: os.Stdin, Out: os.Stdout, Err: os.Stderr, Getenv: os.Getenv})
	stop()
	os.Exit(code)
}
