package server

import (
	"crypto/ed25519"
	"net"
	"os"
	"testing"
	"time"

	"gpucloud/gpuserverd/backend/sim"
	"gpucloud/gpuserverd/worker"
)

// A restarted server adopts only the listed pid: a socket at the worker's path whose peer is
// another process (here the test itself, posing as worker 4242) is not trusted with the
// session's sockets, and the session is closed as cut.
func TestAdoptionRefusesAnImpostor(t *testing.T) {
	pub, _, _ := ed25519.GenerateKey(nil)
	cfg := Config{ServerID: "gs1", PublicKey: pub, WorkerCommand: []string{"/bin/false"}, DataDir: t.TempDir(), BackendKind: sim.Kind}
	s, err := New(cfg, sim.New(2, 1<<30))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Truncate(time.Second)
	se := openTestSession(s, 4242, "a", t0)
	se.ordinals = []int{0}
	if err := s.Checkpoint(t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	s.usage.Close()

	ln, err := net.Listen("unix", worker.AdoptSocketPath(s.adoptDir(workerChannel{}), 4242))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	handed := make(chan int, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 64)
		n, _ := c.Read(buf) // a trusted peer would be sent the sockets here
		handed <- n
	}()
	s2, err := New(cfg, sim.New(2, 1<<30))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.usage.Close()
	if len(s2.adopted) != 0 || s2.metrics.cut != 1 || len(s2.sessions) != 0 {
		t.Fatalf("adopted %d, cut %d, sessions %d; want the impostor refused and the session cut",
			len(s2.adopted), s2.metrics.cut, len(s2.sessions))
	}
	select {
	case n := <-handed:
		if n > 0 {
			t.Fatalf("the impostor was sent %d bytes", n)
		}
	case <-time.After(time.Second):
	}
	if open, err := s2.readOpen(); err != nil || len(open) != 0 {
		t.Fatalf("state file after the restart: %v %v", open, err)
	}
	if _, err := os.Stat(s2.adoptDir(workerChannel{})); err != nil {
		t.Fatal(err)
	}
}
