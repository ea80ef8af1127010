package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"gpucloud/internal/httplimits"
)

// TestSlowBodiesCutOff opens many connections that send headers and then trickle a body, as the
// issue's 3,000 slow clients did, to the console login (unauthenticated, and it reads the body):
// the server cuts each off once its read timeout passes, and answers legitimate requests while
// they are open.
func TestSlowBodiesCutOff(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const readTimeout = time.Second
	_, addr, done := serve(ctx, t, Config{HTTP: httplimits.Limits{ReadTimeout: readTimeout, MaxConns: 200}})
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	waitServing(t, "http://"+addr+"/healthz")

	const slow = 100
	conns := make([]net.Conn, slow)
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /v1/session HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{")
		conns[i] = c
	}
	// Keep trickling: a byte now and then must not keep a connection alive past ReadTimeout.
	stop := make(chan struct{})
	var trickle sync.WaitGroup
	trickle.Add(1)
	go func() {
		defer trickle.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			for _, c := range conns {
				c.Write([]byte(" "))
			}
		}
	}()
	defer func() { close(stop); trickle.Wait() }()

	for i := 0; i < 10; i++ {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			t.Fatalf("a legitimate request while %d slow bodies are open: %v", slow, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("healthz: %d", resp.StatusCode)
		}
	}

	// Every slow connection is closed by the server (EOF or reset), well before the 30 s a
	// generous deadline allows: without a read timeout none is.
	var wg sync.WaitGroup
	open := make(chan int, slow)
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetReadDeadline(time.Now().Add(30 * readTimeout))
			_, err := io.Copy(io.Discard, c)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				open <- i
			}
		}()
	}
	wg.Wait()
	close(open)
	if n := len(open); n > 0 {
		t.Fatalf("%d of %d slow bodies still open after %s", n, slow, 30*readTimeout)
	}
}

// waitServing polls url until the server answers.
func waitServing(t *testing.T, url string) {
	t.Helper()
	for i := 0; ; i++ {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			return
		}
		if i == 100 {
			t.Fatalf("server not answering %s: %v", url, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
