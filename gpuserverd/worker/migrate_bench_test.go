package worker

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"gpucloud/gpuserverd/backend/sim"
	"gpucloud/gpuserverd/wire"
)

// BenchmarkMigrate measures a live migration between two workers over loopback TCP on the
// simulated backend (a test double: its numbers say what the worker's own machinery costs, not
// what a GPU's copies would): pause and total time for an idle session holding size bytes (the
// pre-copy leaves nothing dirty, so the pause sends the image alone).
func BenchmarkMigrate(b *testing.B) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, size := range []uint64{64 << 20, 256 << 20} {
		b.Run(fmt.Sprintf("idle-%dMiB", size>>20), func(b *testing.B) {
			var pause, total float64
			for range b.N {
				g, a, _ := serveTCP(b, sim.New(1, 4<<30))
				a.log = quiet
				var hr wire.HandleReply
				g.call(&wire.MemAlloc{Bytes: size}, &hr)
				toB, fromA := tcpPair(b)
				go func() {
					img, chunks, err := readImage(fromA)
					if err != nil {
						writeReady(fromA, nil, err)
						return
					}
					secret, window := img.secretOrNew(true)
					rc := newRestoredResumeConn("s1", img.In, img.Out, secret, time.Duration(window)*time.Millisecond)
					s := NewSession(Config{SessionID: "s1", Devices: []int{0}}, sim.New(1, 4<<30), rc, quiet)
					s.resume = rc
					s.Restore(img, chunks, func(err error) { writeReady(fromA, secret, err); rc.Close() })
					s.Serve(context.Background())
				}()
				if err := a.Migrate(toB, "b:1", true); err != nil {
					b.Fatal(err)
				}
				p := a.Stats.Snapshot().Migration
				pause += p.PauseMs
				total += p.TotalMs
				g.conn.Close()
			}
			b.ReportMetric(pause/float64(b.N), "pause-ms")
			b.ReportMetric(total/float64(b.N), "total-ms")
		})
	}
}
