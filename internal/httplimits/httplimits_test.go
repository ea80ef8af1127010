package httplimits

import (
	"net"
	"net/http"
	"testing"
	"time"
)

// TestConnectionLimit holds MaxConns connections open: the next client is not served until one
// of them closes (it waits in the backlog instead of taking a file descriptor).
func TestConnectionLimit(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := Limits{MaxConns: 3, ReadHeaderTimeout: time.Minute}
	hs := l.Server(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	go hs.Serve(l.Listener(ln))
	defer hs.Close()
	url := "http://" + ln.Addr().String() + "/"
	get := func(timeout time.Duration) error {
		c := &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := get(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	for i := 0; i < 3; i++ {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte("GET / HTTP/1.1\r\n")) // headers never finished
		held = append(held, c)
	}
	time.Sleep(100 * time.Millisecond) // the server has accepted them
	if err := get(300 * time.Millisecond); err == nil {
		t.Fatal("served a fourth connection while three held the limit of three")
	}
	held[0].Close()
	if err := get(5 * time.Second); err != nil {
		t.Fatalf("not served after a slot freed: %v", err)
	}
}

func TestDefaultsFillZeroFields(t *testing.T) {
	hs := Limits{ReadTimeout: time.Second}.Server(nil)
	if hs.ReadTimeout != time.Second || hs.ReadHeaderTimeout != Default.ReadHeaderTimeout ||
		hs.IdleTimeout != Default.IdleTimeout || hs.MaxHeaderBytes != Default.MaxHeaderBytes {
		t.Fatalf("server %+v", hs)
	}
	if n := (Limits{}).resolved().MaxConns; n < 64 {
		t.Fatalf("default connection limit %d", n)
	}
}
