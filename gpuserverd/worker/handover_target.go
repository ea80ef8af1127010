package worker

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"syscall"
	"time"

	"gpucloud/gpuserverd/backend"
)

// The new worker's side of a handover (handover.go): take the offer, receive the memory, give it
// to the image's devices.

// handoverTarget is the new worker's side: the memory it was handed, by device index, once
// done is closed.
type handoverTarget struct {
	done   chan struct{}
	err    error
	shared map[int][]backend.SharedMapping
}

// takeOffer connects to the old worker if the offer's GPUs are this worker's (uuids, by device
// index); nil when they are not, or the socket cannot be reached (another host).
func takeOffer(o *memoryOffer, uuids []string) *handoverTarget {
	if len(o.Devices) != len(uuids) || len(o.Secret) != 32 || len(o.Socket) < 2 || o.Socket[0] != '@' {
		return nil
	}
	for i, u := range o.Devices {
		if u != "" && u != uuids[i] {
			return nil
		}
	}
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: o.Socket, Net: "unixpacket"})
	if err != nil {
		return nil
	}
	if _, err := c.Write(o.Secret); err != nil {
		c.Close()
		return nil
	}
	t := &handoverTarget{done: make(chan struct{}), shared: map[int][]backend.SharedMapping{}}
	go func() {
		defer close(t.done)
		defer c.Close()
		t.err = t.receive(c, len(uuids))
		if t.err != nil {
			t.close()
		}
	}()
	return t
}

// receive reads the old worker's messages up to its end.
func (t *handoverTarget) receive(c *net.UnixConn, devices int) error {
	buf := make([]byte, 8+16*maxHandoverFDs)
	oob := make([]byte, syscall.CmsgSpace(4*maxHandoverFDs))
	seen := map[[2]uint64]bool{}
	for {
		n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
		if err != nil {
			return fmt.Errorf("memory handed over: %w", err)
		}
		files, ferr := rights(oob[:oobn])
		if ferr != nil || n < 8 {
			closeAll(files)
			return errors.Join(errors.New("memory handed over: a short or malformed message"), ferr)
		}
		dev, count := binary.LittleEndian.Uint32(buf), int(binary.LittleEndian.Uint32(buf[4:]))
		if dev == handoverEnd {
			closeAll(files)
			return nil
		}
		if int(dev) >= devices || count == 0 || count > maxHandoverFDs || n != 8+16*count || len(files) != count ||
			len(t.shared[int(dev)])+count > maxHandedMappings {
			closeAll(files)
			return fmt.Errorf("memory handed over: a message for device %d with %d mappings, %d bytes and %d descriptors", dev, count, n, len(files))
		}
		for i, f := range files {
			m := backend.SharedMapping{Addr: binary.LittleEndian.Uint64(buf[8+16*i:]), Bytes: binary.LittleEndian.Uint64(buf[16+16*i:]), File: f}
			if key := [2]uint64{uint64(dev), m.Addr}; seen[key] || m.Bytes == 0 {
				closeAll(files[i:])
				return fmt.Errorf("memory handed over twice at %#x on device %d, or of 0 bytes", m.Addr, dev)
			} else {
				seen[key] = true
			}
			t.shared[int(dev)] = append(t.shared[int(dev)], m)
		}
	}
}

// rights is the descriptors a message carried, as files.
func rights(oob []byte) ([]*os.File, error) {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := syscall.ParseUnixRights(&m)
		if err != nil {
			closeAll(files)
			return nil, err
		}
		for _, fd := range fds {
			files = append(files, os.NewFile(uintptr(fd), "handed-memory"))
		}
	}
	return files, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// close closes every file handed over.
func (t *handoverTarget) close() {
	for _, maps := range t.shared {
		for _, m := range maps {
			m.File.Close()
		}
	}
	t.shared = nil
}

// attach waits for the memory the old worker hands over and gives each device's image its part.
func (t *handoverTarget) attach(img *SessionImage) error {
	select {
	case <-t.done:
	case <-time.After(readyTimeout):
		return errors.New("memory handed over: the old worker never finished")
	}
	if t.err != nil {
		return t.err
	}
	for dev, maps := range t.shared {
		if dev >= len(img.Devices) || img.Devices[dev] == nil {
			t.close()
			return fmt.Errorf("memory handed over for device %d, which the image does not hold", dev)
		}
		img.Devices[dev].Context.Shared = maps
	}
	return nil
}

// readMigration reads a migration's image (readImage), taking the old worker's memory offer when
// this worker's GPUs (uuids, by device index) are the offer's; memory handed over is attached to
// the image's devices (closeShared closes it once restored).
func readMigration(r io.Reader, uuids []string) (*SessionImage, []imageChunkRec, error) {
	var t *handoverTarget
	img, chunks, err := readImageWith(r, func(o *memoryOffer) { t = takeOffer(o, uuids) })
	switch {
	case err != nil:
	case img.Handed && t == nil:
		err = errors.New("session image: its memory was handed over on a socket this worker could not reach")
	case img.Handed:
		err = t.attach(img)
	}
	// A target whose offer went unused ends when the old worker closes the socket.
	return img, chunks, err
}

// handedSpans is the memory handed over for each device index, sorted by address, without files.
func (img *SessionImage) handedSpans() map[int][]backend.SharedMapping {
	out := map[int][]backend.SharedMapping{}
	for i, d := range img.Devices {
		if d == nil || d.Context == nil {
			continue
		}
		for _, m := range d.Context.Shared {
			out[i] = append(out[i], backend.SharedMapping{Addr: m.Addr, Bytes: m.Bytes})
		}
		slices.SortFunc(out[i], func(a, b backend.SharedMapping) int { return cmp.Compare(a.Addr, b.Addr) })
	}
	return out
}

// closeShared closes the files of the memory handed over for img (a restore's end: the mappings
// hold the memory from then on).
func (img *SessionImage) closeShared() {
	for _, d := range img.Devices {
		if d != nil && d.Context != nil {
			for _, m := range d.Context.Shared {
				m.File.Close()
			}
			d.Context.Shared = nil
		}
	}
}
