// Package termrelay joins a user's WebSocket to a serial console, in both directions, with the
// limits an interactive console needs: a bound on each frame the user sends, an idle timeout,
// and byte counts for the audit log. The apiserver relays a browser or gpuctl to hostd with it;
// hostd relays the apiserver to the domain's console stream.
package termrelay

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/websocket"
)

// Why a relay ended.
const (
	EndUser    = "user-closed"     // the user's side closed or failed
	EndConsole = "console-closed"  // the console's side ended (the VM stopped, the host went away)
	EndIdle    = "idle-timeout"    // nothing moved either way for the idle timeout
	EndFrame   = "frame-too-large" // the user sent a frame over the limit
	EndContext = "ended"           // the server is stopping, or the session's time is up
)

// Limits bound a relay.
type Limits struct {
	MaxFrame int           // bytes in one frame from the user
	Idle     time.Duration // no bytes either way this long ends the session
	// SayWhy sends the user a last text frame, a Closing, before closing their side.
	SayWhy bool
}

// Closing is the last text frame a user gets when Limits.SayWhy is set.
type Closing struct {
	Closed string `json:"closed"` // one of the End reasons
}

// Stats is what a relay moved, and why it ended.
type Stats struct {
	In     int64  `json:"bytes_in"`  // user -> console
	Out    int64  `json:"bytes_out"` // console -> user
	Reason string `json:"reason"`
}

// Pipe relays until one side ends, the idle timeout passes or ctx ends, then closes both sides.
// Frames from the user (text or binary) go to console as bytes; console output goes back as
// binary frames.
func Pipe(ctx context.Context, user *websocket.Conn, console io.ReadWriteCloser, lim Limits) Stats {
	user.PayloadType = websocket.BinaryFrame
	user.MaxPayloadBytes = lim.MaxFrame
	var (
		st       Stats
		last     atomic.Int64
		endOnce  sync.Once
		finished = make(chan struct{})
		wg       sync.WaitGroup
	)
	touch := func() { last.Store(time.Now().UnixNano()) }
	end := func(reason string) {
		endOnce.Do(func() {
			st.Reason = reason
			close(finished)
			if lim.SayWhy && reason != EndUser {
				user.SetWriteDeadline(time.Now().Add(2 * time.Second))
				websocket.JSON.Send(user, Closing{Closed: reason})
			}
			user.Close()
			console.Close()
		})
	}
	touch()
	wg.Add(2)
	go func() { // user -> console
		defer wg.Done()
		for {
			var msg []byte
			err := websocket.Message.Receive(user, &msg)
			if errors.Is(err, websocket.ErrFrameTooLarge) {
				end(EndFrame)
				return
			}
			if err != nil {
				end(EndUser)
				return
			}
			touch()
			if len(msg) == 0 {
				continue
			}
			n, err := console.Write(msg)
			atomic.AddInt64(&st.In, int64(n))
			if err != nil {
				end(EndConsole)
				return
			}
		}
	}()
	go func() { // console -> user
		defer wg.Done()
		buf := make([]byte, 16<<10)
		for {
			n, err := console.Read(buf)
			if n > 0 {
				touch()
				if _, werr := user.Write(buf[:n]); werr != nil {
					end(EndUser)
					return
				}
				atomic.AddInt64(&st.Out, int64(n))
			}
			if err != nil {
				end(EndConsole)
				return
			}
		}
	}()
	tick := time.NewTicker(idleCheck(lim.Idle))
	defer tick.Stop()
	for done := false; !done; {
		select {
		case <-finished:
			done = true
		case <-ctx.Done():
			end(EndContext)
		case now := <-tick.C:
			if lim.Idle > 0 && now.Sub(time.Unix(0, last.Load())) > lim.Idle {
				end(EndIdle)
			}
		}
	}
	wg.Wait()
	return Stats{In: atomic.LoadInt64(&st.In), Out: atomic.LoadInt64(&st.Out), Reason: st.Reason}
}

func idleCheck(idle time.Duration) time.Duration {
	if idle <= 0 || idle > 4*time.Second {
		return time.Second
	}
	return idle / 4
}
