package server

import (
	"testing"
	"time"

	"gpucloud/api"
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
