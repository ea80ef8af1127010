package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"time"

	"gpucloud/hostd/console"
	"gpucloud/hostd/reconcile"
	"gpucloud/hostd/virt"
	"gpucloud/internal/httplimits"
	"gpucloud/internal/termrelay"
)

func checkConsoleFlags(o options) error {
	if (o.consoleCert == "") != (o.consoleKey == "") {
		return errors.New("-console-tls-cert and -console-tls-key go together")
	}
	if o.consoleURL != "" {
		u, err := url.Parse(o.consoleURL)
		if err != nil || (u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return fmt.Errorf("-console-url %q: want ws://host:port or wss://host:port", o.consoleURL)
		}
	}
	if o.consoleIdle < time.Minute || o.consoleIdle > 24*time.Hour {
		return fmt.Errorf("-console-idle %v out of range 1m-24h", o.consoleIdle)
	}
	return nil
}

// listenConsole opens -console-listen and returns it with the URL the apiserver is told (nil
// and "" when consoles are off).
func listenConsole(o options) (net.Listener, string, error) {
	if o.consoleListen == "" {
		return nil, "", nil
	}
	ln, err := net.Listen("tcp", o.consoleListen)
	if err != nil {
		return nil, "", fmt.Errorf("-console-listen: %w", err)
	}
	u := o.consoleURL
	if u == "" {
		scheme := "ws"
		if o.consoleCert != "" {
			scheme = "wss"
		}
		u = scheme + "://" + ln.Addr().String()
	}
	return ln, u, nil
}

// serveConsole serves interactive consoles on ln until ctx ends; the returned func waits for
// the server to stop.
func serveConsole(ctx context.Context, o options, ln net.Listener, r *reconcile.Reconciler, hv *virt.Hypervisor, log *slog.Logger) func() {
	cs := &console.Server{
		Auth: r.ConsoleAuth,
		Open: func(id string) (io.ReadWriteCloser, error) { return hv.OpenConsole(virt.DomainName(id)) },
		Log:  log, Limits: termrelay.Limits{Idle: o.consoleIdle},
	}
	// The upgrade hijacks each connection, which clears the read deadlines the limits set.
	srv := httplimits.Default.Server(cs.Handler(ctx))
	go func() {
		var err error
		if o.consoleCert != "" {
			err = srv.ServeTLS(ln, o.consoleCert, o.consoleKey)
		} else {
			err = srv.Serve(ln)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("console listener", "err", err)
		}
	}()
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}
}
