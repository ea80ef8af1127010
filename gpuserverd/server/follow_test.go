package server

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"gpucloud/api"
	"gpucloud/gpuserverd/backend/sim"
	"gpucloud/gpuserverd/wire"
	"gpucloud/gpuserverd/worker"
	"gpucloud/internal/sessiontoken"
)

// A late session of a moved instance is claimed for one follow-up migration at a time, only
// within the window after its move began; other sessions are ended as before.
func TestLateSessionsFollowTheirMove(t *testing.T) {
	var b moveBook
	b.init()
	now := time.Now()
	b.noteAway(api.GPUServerMove{MoveID: "m1", InstanceID: "inst-1", Target: "gs-b:7070"}, now)
	if _, ok := b.follow("inst-2", now); ok {
		t.Fatal("a session of an instance that never moved follows a move")
	}
	m, ok := b.follow("inst-1", now.Add(time.Second))
	if !ok || m.Target != "gs-b:7070" || !b.isFollowing("inst-1") {
		t.Fatalf("late session of the moved instance: %+v %v", m, ok)
	}
	if _, again := b.follow("inst-1", now.Add(time.Second)); again {
		t.Fatal("a second follow-up started while one runs")
	}
	b.followed("inst-1")
	if _, ok := b.follow("inst-1", now.Add(followWindow+time.Second)); ok {
		t.Fatal("a session follows a move past the window")
	}
	b.noteAway(api.GPUServerMove{MoveID: "m2", InstanceID: "inst-3"}, now.Add(followWindow+2*time.Second))
	if _, ok := b.away["inst-1"]; ok {
		t.Fatal("an expired move is kept")
	}
}

// migrationTarget stands in for the move's target server: it accepts each MigrateIn and hands
// it to the test (up to 4; the test reads the first).
func migrationTarget(t *testing.T) (string, <-chan wire.MigrateIn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan wire.MigrateIn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			h, p, err := wire.ReadFrame(c, nil)
			var in wire.MigrateIn
			if err == nil && h.Type == wire.TypeMigrateIn && in.Decode(p) == nil {
				c.Write(wire.AppendFrame(nil, &wire.MigrateInReply{}, 0, 0))
				got <- in
			}
			c.Close() // the source keeps its own copy for the worker
		}
	}()
	return ln.Addr().String(), got
}

// The chaos test's failure (deploy/chaos; the guest's resume "refused: wrong session or key",
// then cuMemFree = 999): a drain moved an instance off this server with no session here; this
// gpuserverd was then killed and started again; the instance's guest, started with its VM's old
// guest.conf, opened a session here; the apiserver, which names a move only while it is open,
// named the session no longer placed here, and the restarted server, which had forgotten the
// move, ended it. The move is kept on disk: the restarted server sends the late session after
// its instance, to the move's target with the move's token, and does not end it.
func TestLateSessionFollowsItsMoveAfterARestart(t *testing.T) {
	pub, _, _ := ed25519.GenerateKey(nil)
	cfg := Config{ServerID: "gs1", PublicKey: pub, WorkerCommand: []string{"/bin/false"},
		DataDir: t.TempDir(), BackendKind: sim.Kind}
	target, migrations := migrationTarget(t)
	m := api.GPUServerMove{MoveID: "m1", InstanceID: "inst-1", TargetID: "gs2", Target: target,
		Token: api.SessionToken{Token: "token-for-gs2", ExpiresAt: time.Now().Add(time.Hour)}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The first gpuserverd runs the move, done at once (no session of the instance here yet),
	// and is killed: nothing of it goes on but its data dir.
	first, err := New(cfg, sim.New(2, 1<<30))
	if err != nil {
		t.Fatal(err)
	}
	first.moves.init()
	first.startMoves(ctx, nil, []api.GPUServerMove{m})
	first.wg.Wait()
	if r := first.moves.reports(); len(r) != 1 || r[0].State != api.MoveDone {
		t.Fatalf("the move: %+v", r)
	}
	first.usage.Close()

	// The next one starts on the same data dir. The apiserver, the move finished, hands it no move.
	s, err := New(cfg, sim.New(2, 1<<30))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.usage.Close() })
	s.moves.init()
	// The late session; its worker is a process the test watches, its lane socket the test's.
	proc := exec.Command("sleep", "60")
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { proc.Wait(); close(exited) }()
	defer proc.Process.Kill()
	here, there := lanePair(t)
	s.mu.Lock()
	s.sessions[proc.Process.Pid] = &session{pid: proc.Process.Pid, lanes: here,
		claims: sessiontoken.Claims{SessionID: "inst-1", InstanceID: "inst-1", TenantID: "t1"}}
	s.mu.Unlock()

	s.EndSessions(ctx, []string{"inst-1"}) // the heartbeat's answer: no longer placed here

	select {
	case <-exited:
		t.Fatal("the restarted server ended the late session of a moved instance instead of sending it after the instance")
	case in := <-migrations:
		if in.SessionID != "inst-1" || in.Token != m.Token.Token {
			t.Fatalf("the target was asked to take in %q with token %q, want the move's", in.SessionID, in.Token)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the late session never followed its instance's move")
	}
	// Its worker is told to move it there: the guest is redirected on its own stream.
	wc, err := net.FileConn(there)
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Close()
	wc.SetDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	n, _, _, _, err := wc.(*net.UnixConn).ReadMsgUnix(buf, make([]byte, syscall.CmsgSpace(4)))
	var c worker.Control
	if err != nil || bytes.IndexByte(buf[:n], '{') < 0 || json.Unmarshal(buf[bytes.IndexByte(buf[:n], '{'):n], &c) != nil {
		t.Fatalf("the worker's control message: %q %v", buf[:n], err)
	}
	if c.Op != "migrate" || c.Address != target {
		t.Fatalf("the worker was told %+v, want to migrate to %s", c, target)
	}
	select {
	case <-exited:
		t.Fatal("the late session's worker was ended while it moved")
	default:
	}
	cancel()
	s.wg.Wait()
}

// The book of moves off this server is read back as written; entries past their window are
// dropped, and a file that is not a book is refused whole, naming what is wrong.
func TestMovesOffThisServerAreKeptOnDisk(t *testing.T) {
	path := filepath.Join(t.TempDir(), awayFile)
	now := time.Now()
	var b moveBook
	if n, err := b.loadAway(path, now); n != 0 || err != nil {
		t.Fatalf("no file: %d %v", n, err)
	}
	tok := api.SessionToken{Token: "tok"}
	b.noteAway(api.GPUServerMove{MoveID: "m1", InstanceID: "inst-1", Target: "gs-b:7070", Token: tok}, now)
	// A token that expires first ends the window with it.
	short := api.SessionToken{Token: "tok2", ExpiresAt: now.Add(time.Minute)}
	if err := b.noteAway(api.GPUServerMove{MoveID: "m2", InstanceID: "inst-2", Target: "gs-b:7070", Token: short}, now); err != nil {
		t.Fatal(err)
	}
	var again moveBook
	if n, err := again.loadAway(path, now.Add(90*time.Second)); n != 1 || err != nil {
		t.Fatalf("read back after 90 s: %d %v, want the move whose token is still good", n, err)
	}
	if m, ok := again.follow("inst-1", now.Add(90*time.Second)); !ok || m.MoveID != "m1" || m.Token.Token != "tok" {
		t.Fatalf("read back: %+v %v", m, ok)
	}
	// The instance moving back here ends its late sessions' following, on disk too.
	if err := again.cameBack("inst-1"); err != nil {
		t.Fatal(err)
	}
	if _, ok := again.follow("inst-1", now.Add(91*time.Second)); ok {
		t.Fatal("a session of an instance that moved back here still follows its old move")
	}
	var third moveBook
	if n, err := third.loadAway(path, now.Add(92*time.Second)); n != 0 || err != nil {
		t.Fatalf("read back after the instance came back: %d %v, want none", n, err)
	}
	for _, bad := range []struct{ content, want string }{
		{"{", "unexpected end"},
		{`[{"move":{"move_id":"m3","instance_id":"inst-3","target":"gs-b:7070"},"until":"2999-01-01T00:00:00Z"}]`, "move.token"},
	} {
		os.WriteFile(path, []byte(bad.content), 0o600)
		var c moveBook
		if n, err := c.loadAway(path, now); err == nil || !strings.Contains(err.Error(), bad.want) || n != 0 || len(c.away) != 0 {
			t.Errorf("%s: %d %v, want an error naming %q and an empty book", bad.content, n, err, bad.want)
		}
	}
}

// Whatever is in the book's file, reading it either keeps only well-formed moves whose window is
// open, or refuses it whole and keeps none.
func FuzzLoadAway(f *testing.F) {
	f.Add([]byte(`[{"move":{"move_id":"m1","instance_id":"i1","target":"gs-b:7070","token":{"token":"t"}},"until":"2999-01-01T00:00:00Z"}]`))
	f.Add([]byte(`[{"move":{"instance_id":"i1"},"until":"2000-01-01T00:00:00Z"}]`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), awayFile)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		var b moveBook
		n, err := b.loadAway(path, now)
		if n != len(b.away) || err != nil && n != 0 {
			t.Fatalf("kept %d (book %d) with error %v", n, len(b.away), err)
		}
		for id, a := range b.away {
			if id != a.Move.InstanceID || a.Move.Target == "" || a.Move.Token.Token == "" || !now.Before(a.Until) {
				t.Fatalf("kept %q: %+v", id, a)
			}
		}
	})
}
