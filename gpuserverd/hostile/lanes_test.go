package hostile

import (
	"testing"
	"time"

	"gpucloud/gpuserverd/wire"
	"gpucloud/internal/sessiontoken"
)

// TestLaneHelloNoOracle is issue 13's finding 12 on the data plane: a LaneHello comes before any
// authentication, so a wrong key for a live session and any key for a session that does not
// exist get the same answer, after the same kind of pause; only the session's own key attaches.
func TestLaneHelloNoOracle(t *testing.T) {
	s := start(t)
	c, r := s.hello(s.token("inst-live", sessiontoken.TierShared, 1<<20))
	if r.Result != 0 {
		t.Fatal(r.Message)
	}
	var open wire.LanesOpenReply
	c.send(&wire.LanesOpen{Lanes: 2})
	c.read(&open)
	if open.Result != 0 || len(open.Key) != 32 {
		t.Fatalf("LanesOpen: %+v", open)
	}
	lane := func(session string, key []byte, idx uint32) (wire.Status, time.Duration) {
		l := s.dial("")
		start := time.Now()
		if _, err := l.conn.Write(wire.AppendFrame(nil, &wire.LaneHello{Version: wire.Version, SessionID: session, Key: key, Lane: idx}, 0, 0)); err != nil {
			t.Fatal(err)
		}
		var st wire.Status
		l.read(&st)
		return st, time.Since(start)
	}
	wrong := make([]byte, 32)
	live, liveTook := lane("inst-live", wrong, 0)
	unknown, unknownTook := lane("inst-nobody", wrong, 0)
	if live != unknown || live.Result != 800 {
		t.Fatalf("refusals differ: live session, wrong key %+v; unknown session %+v", live, unknown)
	}
	t.Logf("refusal %q after %v (live session) and %v (unknown)", live.Message, liveTook, unknownTook)
	if liveTook < 20*time.Millisecond || unknownTook < 20*time.Millisecond {
		t.Fatalf("a refusal came back in %v / %v, before the pause that hides which path refused it", liveTook, unknownTook)
	}
	if ok, _ := lane("inst-live", open.Key, 0); ok.Result != 0 {
		t.Fatalf("the session's own key: %+v", ok)
	}
}
