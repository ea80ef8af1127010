package worker

import (
	"bytes"
	"io"
	"log/slog"
	"testing"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/backend/sim"
)

// FuzzRestoreImage feeds arbitrary bytes to a restoring worker: a session image comes from a
// file or another server, so whatever it holds must be refused by name or rebuilt, never panic,
// and a refused restore must leave no device memory held.
func FuzzRestoreImage(f *testing.F) {
	var seed bytes.Buffer
	iw := newImageWriter(&seed)
	iw.data(0, 0x7f2c00000000, []byte{1, 2, 3, 4})
	iw.image(&SessionImage{Version: ImageVersion, SessionID: "s", Devices: []*DeviceImage{{
		Allocs: map[uint64]uint64{0x7f2c00000000: 64}, Used: 64,
		Context: &backend.ContextImage{NextHandle: 4, Regions: []backend.Region{{Addr: 0x7f2c00000000, Bytes: 64}},
			Modules:   []backend.ModuleImage{{Handle: 1, Image: []byte("GPUSIM-MODULE 1\nkernel fill_u32\n")}},
			Functions: []backend.FunctionImage{{Handle: 2, Module: 1, Name: "fill_u32"}},
			Streams:   []backend.StreamImage{{Handle: 3, Flags: 1}}}}}})
	iw.data(0, 0x7f2c00000010, []byte{5, 6})
	iw.end()
	f.Add(seed.Bytes())
	f.Add([]byte("E"))
	f.Add([]byte("I\x02\x00\x00\x00{}E"))
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		img, chunks, err := readImage(bytes.NewReader(b))
		if err != nil {
			return
		}
		be := sim.New(1, 1<<24)
		s := NewSession(Config{SessionID: img.SessionID, Devices: make([]int, len(img.Devices))}, be, nil, log)
		if s.Restore(img, chunks, nil) != nil {
			return
		}
		err = s.applyImage()
		s.close()
		c, _ := be.NewContext(0)
		defer c.Close()
		if free, total, _ := c.MemGetInfo(); free != total {
			t.Fatalf("a closed session (restore: %v) left %d bytes held", err, total-free)
		}
	})
}
