package worker

import (
	"fmt"
	"os"

	"gpucloud/gpuserverd/backend"
)

// How an arena copy reaches the device. GPUCLOUD_SHM_COPY picks one for a measurement on the GPU
// (docs/benchmarks/gpu-remote-h100.md): "" is cuMemcpyHtoD/DtoH on the arena's host bytes;
// "dtod" is cuMemcpyDtoD on the arena's device address; "split2"/"split4" cut the copy into
// pieces on as many streams, so that several copy engines read the arena at once.
type shmWay struct {
	kind    string
	pieces  int
	streams []backend.Handle // pieces-1 of the worker's own, made on first use
	before  backend.Handle   // recorded on the copy's stream: the pieces start after its work
	after   []backend.Handle // one per own stream: the copy's stream waits for them
}

func shmWayFromEnv() *shmWay {
	w := &shmWay{kind: os.Getenv("GPUCLOUD_SHM_COPY"), pieces: 1}
	switch w.kind {
	case "split2":
		w.pieces = 2
	case "split4":
		w.pieces = 4
	}
	return w
}

// shmCopy moves n bytes between the arena at off (whose host bytes are host) and the device at
// dev on stream, the way the arena's shmWay says.
func (s *Session) shmCopy(d *device, h2d bool, dev, off uint64, host []byte, stream backend.Handle, async bool) error {
	w, c := s.shm.way, d.ctx
	switch {
	case w.kind == "dtod" && s.shm.devAddr != 0 && c == s.shm.reg:
		if h2d {
			return c.MemcpyDtoD(dev, s.shm.devAddr+off, uint64(len(host)), stream, async)
		}
		return c.MemcpyDtoD(s.shm.devAddr+off, dev, uint64(len(host)), stream, async)
	case w.pieces > 1 && c == s.shm.reg && len(host) >= w.pieces<<20:
		return w.split(c, h2d, dev, host, stream, async)
	}
	if h2d {
		return c.MemcpyHtoD(dev, host, stream, async)
	}
	return c.MemcpyDtoH(host, dev, stream, async)
}

func (w *shmWay) split(c backend.Context, h2d bool, dev uint64, host []byte, stream backend.Handle, async bool) error {
	if w.streams == nil {
		for range w.pieces - 1 {
			st, err := c.StreamCreate(1) // non-blocking: ordered only by the events below
			if err != nil {
				return fmt.Errorf("split copy: %w", err)
			}
			ev, err := c.EventCreate(2) // no timing
			if err != nil {
				return fmt.Errorf("split copy: %w", err)
			}
			w.streams, w.after = append(w.streams, st), append(w.after, ev)
		}
		ev, err := c.EventCreate(2)
		if err != nil {
			return fmt.Errorf("split copy: %w", err)
		}
		w.before = ev
	}
	if err := c.EventRecord(w.before, stream); err != nil {
		return err
	}
	part := (len(host)/w.pieces + 4095) &^ 4095
	for i := range w.pieces {
		lo, hi := i*part, min((i+1)*part, len(host))
		st := stream
		if i > 0 {
			st = w.streams[i-1]
			if err := c.StreamWaitEvent(st, w.before); err != nil {
				return err
			}
		}
		var err error
		if h2d {
			err = c.MemcpyHtoD(dev+uint64(lo), host[lo:hi], st, true)
		} else {
			err = c.MemcpyDtoH(host[lo:hi], dev+uint64(lo), st, true)
		}
		if err != nil {
			return err
		}
	}
	for i, st := range w.streams {
		if err := c.EventRecord(w.after[i], st); err != nil {
			return err
		}
		if err := c.StreamWaitEvent(stream, w.after[i]); err != nil {
			return err
		}
	}
	if async {
		return nil
	}
	return c.StreamSynchronize(stream)
}
