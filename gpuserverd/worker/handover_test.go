package worker

import (
	"encoding/binary"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"gpucloud/gpuserverd/backend"
)

// unixPair is a connected pair of Unix sockets.
func unixPair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "pair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}

func tempFile(t *testing.T) *os.File {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "mem")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// What the old worker sends arrives as the mappings it named, by device.
func TestHandoverReceivesWhatWasSent(t *testing.T) {
	a, b := unixPair(t)
	var maps []backend.SharedMapping
	for i := range 70 { // two messages
		maps = append(maps, backend.SharedMapping{Addr: 0x1000 * uint64(i+1), Bytes: 0x1000, File: tempFile(t)})
	}
	go func() {
		sendMemory(a, 1, maps)
		endMemory(a)
	}()
	tg := &handoverTarget{shared: map[int][]backend.SharedMapping{}}
	if err := tg.receive(b, 2); err != nil {
		t.Fatal(err)
	}
	got := tg.shared[1]
	if len(got) != 70 || len(tg.shared) != 1 || got[69].Addr != 0x1000*70 || got[0].File == nil {
		t.Fatalf("received %d mappings on %d devices", len(got), len(tg.shared))
	}
	tg.close()
}

// A hostile or broken old worker's messages are refused, naming what is wrong.
func TestHandoverRefusesMalformedMessages(t *testing.T) {
	msg := func(dev, count uint32, entries ...uint64) []byte {
		b := binary.LittleEndian.AppendUint32(nil, dev)
		b = binary.LittleEndian.AppendUint32(b, count)
		for _, e := range entries {
			b = binary.LittleEndian.AppendUint64(b, e)
		}
		return b
	}
	for name, tc := range map[string]struct {
		payload []byte
		files   int
		want    string
	}{
		"a device past the session's": {msg(5, 1, 0x1000, 0x1000), 1, "device 5"},
		"fewer descriptors":           {msg(0, 2, 0x1000, 0x1000, 0x2000, 0x1000), 1, "2 mappings"},
		"no descriptor":               {msg(0, 1, 0x1000, 0x1000), 0, "1 mappings"},
		"0 bytes":                     {msg(0, 1, 0x1000, 0), 1, "0 bytes"},
		"the same address twice":      {msg(0, 2, 0x1000, 0x1000, 0x1000, 0x1000), 2, "twice"},
		"a short message":             {[]byte{1, 2, 3}, 0, "short"},
	} {
		t.Run(name, func(t *testing.T) {
			a, b := unixPair(t)
			var fds []int
			for range tc.files {
				fds = append(fds, int(tempFile(t).Fd()))
			}
			var oob []byte
			if len(fds) > 0 {
				oob = syscall.UnixRights(fds...)
			}
			if _, _, err := a.WriteMsgUnix(tc.payload, oob, nil); err != nil {
				t.Fatal(err)
			}
			a.Close()
			tg := &handoverTarget{shared: map[int][]backend.SharedMapping{}}
			err := tg.receive(b, 1)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error naming %q", err, tc.want)
			}
		})
	}
}
