package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"gpucloud/api"
	"gpucloud/gpuserverd/backend/sim"
)

func TestHeartbeatReportsInventory(t *testing.T) {
	s, _ := newServer(t)
	got := make(chan api.GPUServerReport, 4)
	var auth string
	as := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/agent/gpu-server/heartbeat" || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		auth = r.Header.Get("Authorization")
		var rep api.GPUServerReport
		json.NewDecoder(r.Body).Decode(&rep)
		got <- rep
		json.NewEncoder(w).Encode(api.GPUServerAck{GPUServerID: "gs1", HeartbeatPeriod: 10 * time.Millisecond})
	}))
	defer as.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.RunHeartbeat(ctx, Heartbeat{APIServer: as.URL, Credential: "cred-1", Endpoint: "10.0.0.5:7070", Period: time.Hour})
	for i := range 2 { // the second arrives only if the ack's period was taken
		select {
		case rep := <-got:
			if rep.Backend != sim.Kind || len(rep.GPUs) != 2 || rep.GPUs[1].UUID != sim.UUID(1) ||
				rep.Endpoint != "10.0.0.5:7070" || rep.ActiveSessions == nil {
				t.Fatalf("report %d: %+v", i, rep)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("heartbeat %d never came", i)
		}
	}
	if auth != "Bearer cred-1" {
		t.Fatalf("Authorization %q", auth)
	}
}
