package server_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"gpucloud/api"
)

// A GPU server's heartbeat must not deadlock with a create that has claimed one of its GPUs:
// the create holds the GPU row and then checks the instance's foreign key to the GPU server
// (FOR KEY SHARE); the heartbeat holds the GPU server row and then upserts the GPU rows. The
// chaos test found this (deadlock detected, a 500 on POST /v1/instances) when a restarted
// gpuserverd's heartbeat met a create. The heartbeat's row lock must leave key-share free.
func TestGPUServerHeartbeatDoesNotDeadlockWithCreate(t *testing.T) {
	e := newEnv(t)
	cred, _ := e.gpuServer("g1", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	tx, err := e.st.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var server string
	// What placement does first: claim the GPU row.
	if err := tx.QueryRow(ctx, `SELECT gpu_server_id::text FROM gpus WHERE uuid = 'GPU-g1-0' FOR UPDATE`).Scan(&server); err != nil {
		t.Fatal(err)
	}
	rep := api.GPUServerReport{Hostname: "g1", Endpoint: "g1:7000", Backend: "simulated",
		GPUs: []api.GPUInfo{{UUID: "GPU-g1-0", Name: "NVIDIA H100 80GB HBM3", MemoryBytes: uint64(80 * gib), Healthy: true}}}
	hb := make(chan string, 1)
	go func() {
		status, _, body := e.call("POST", "/v1/agent/gpu-server/heartbeat", cred, rep, nil)
		hb <- fmt.Sprintf("%d %s", status, body)
	}()
	// Wait until the heartbeat queues on the GPU row.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var waiting int
		if err := e.st.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the heartbeat never waited on the claimed GPU row")
		}
	}
	// What the create's INSERT INTO instances does next: the foreign key check on the GPU server.
	if _, err := tx.Exec(ctx, `SELECT 1 FROM gpu_servers WHERE id = $1 FOR KEY SHARE`, server); err != nil {
		t.Fatalf("the create's foreign key check against a heartbeating GPU server: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-hb:
		if got[:3] != "200" {
			t.Fatalf("heartbeat after the create committed: %s", got)
		}
	case <-ctx.Done():
		t.Fatal("heartbeat still blocked after the create committed")
	}
}
