package server

import (
	"math"
	"testing"

	"github.com/google/uuid"

	"gpucloud/api"
)

// A GPU server's move reports are untrusted (a compromised gpuserverd): checkMoveReports never
// panics, and what it accepts names moves by id, in a known state, with sane numbers.
func FuzzMoveReports(f *testing.F) {
	for _, s := range []string{`{"moves":[{"move_id":"0190c0de-0000-7000-8000-000000000000","state":"done","sessions_moved":1}]}`,
		`{"moves":[{"move_id":"x","state":"teleported","pause_ms":-1}]}`, `{"moves":[{"state":"failed","reason":""}]}`,
		`{"moves":null}`, `{"moves":[{"move_id":"0190c0de-0000-7000-8000-000000000000","state":"moving","bytes_copied":18446744073709551615}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var r api.GPUServerReport
		if decodeJSON(body, &r) != nil {
			return
		}
		var fe fields
		checkMoveReports(&fe, r.Moves)
		if fe.err() != nil {
			return
		}
		for _, m := range r.Moves {
			if _, err := uuid.Parse(m.MoveID); err != nil {
				t.Fatalf("accepted move id %q", m.MoveID)
			}
			if m.State != api.MoveMoving && m.State != api.MoveDone && m.State != api.MoveFailed {
				t.Fatalf("accepted state %q", m.State)
			}
			if len(m.Reason) > 1024 || m.SessionsMoved < 0 || m.PauseMs < 0 || math.IsNaN(m.PauseMs) || m.BytesCopied >= 1<<62 {
				t.Fatalf("accepted %+v", m)
			}
		}
	})
}

// A host's move reports are untrusted (a compromised hostd): checkHostMoveReport never panics,
// and what it accepts is in a known state, with sane numbers, an observation only with done.
func FuzzHostMoveReport(f *testing.F) {
	for _, s := range []string{`{"state":"ready","bytes_total":1048576}`, `{"state":"copying","bytes_copied":-1}`,
		`{"state":"done","observed":{"state":"running","forwards":[{"guest_port":22,"host_port":22001}],"public_host":"h2"}}`,
		`{"state":"failed","observed":{"state":"running"}}`, `{"state":"done","observed":{"state":"flying","private_address":"8.8.8.8"}}`,
		`{"state":"teleported"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var r api.HostMoveReport
		if decodeJSON(body, &r) != nil || checkHostMoveReport(r) != nil {
			return
		}
		switch r.State {
		case api.HostMoveReady, api.HostMoveCopying, api.HostMoveDone, api.HostMoveFailed:
		default:
			t.Fatalf("accepted state %q", r.State)
		}
		if len(r.Reason) > 1024 || r.BytesCopied < 0 || r.BytesTotal < 0 || r.BytesCopied >= 1<<62 {
			t.Fatalf("accepted %+v", r)
		}
		if o := r.Observed; o != nil && (r.State != api.HostMoveDone || checkObserved(*o) != nil || len(o.Forwards) > 1+maxForwardPorts) {
			t.Fatalf("accepted observation %+v with %s", o, r.State)
		}
	})
}
