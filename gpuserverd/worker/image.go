package worker

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	"gpucloud/gpuserverd/backend"
)

// A session image (issue 18) is what rebuilds a session in a fresh worker: the worker's own
// books (allocations, cuBLAS workspaces, the guest's stream counts) and each device's
// backend.ContextImage, then the contents of the device memory the images list. It travels as a
// stream of records, to a file (a checkpoint) or to another server's worker (a migration):
//
//	'D' u32 device index, u64 address, u32 n, n bytes   device memory contents
//	'I' u32 n, n bytes                                  the SessionImage, JSON
//	'H' u32 n, n bytes                                  a memory offer, JSON (handover.go); first, if at all
//	'E'                                                 the end
//
// Contents may come before the image (a migration sends memory while the program still runs)
// and again after it (what the program wrote since); the last write of a byte wins. A reader
// checks every record against the image before it touches a GPU.

// ImageVersion is the version of the SessionImage encoding.
const ImageVersion = 1

// maxImageJSON bounds the image record (modules' images are the bulk: a few of MaxFrame).
const maxImageJSON = 1 << 30

// maxImageDevices bounds the devices an image may hold (a server has at most 16 GPUs).
const maxImageDevices = 16

// imageChunk is the most bytes one 'D' record carries.
const imageChunk = 4 << 20

// SessionImage is the worker's part of a session image.
type SessionImage struct {
	Version   int    `json:"version"`
	SessionID string `json:"session_id"`
	Current   int    `json:"current"`
	// Devices are by the session's device index; nil where the session never used the device.
	Devices []*DeviceImage `json:"devices"`
	// Pending is the CUDA code of an asynchronous call's error not yet reported (0: none).
	Pending int32 `json:"pending,omitempty"`
	// In and Out count the guest's stream (resume.go): a restored worker goes on counting from
	// them, so the guest resumes on it as on its old one.
	In  uint64 `json:"in"`
	Out uint64 `json:"out"`
	// Secret and WindowMs are the guest's resume grant, kept by a checkpoint to a file so the
	// guest resumes on the restored worker; a migration leaves them out (the new worker grants
	// its own secret, sent to the guest with MigrateRedirect).
	Secret   []byte `json:"secret,omitempty"`
	WindowMs uint32 `json:"window_ms,omitempty"`
	// HandOff is when a migrated session stopped being the old worker's: the old server bills
	// the session to it and the new one from it.
	HandOff time.Time `json:"hand_off,omitzero"`
	// Handed says the memory came over the offer's socket (handover.go): the stream carries only
	// the regions no mapping handed over holds.
	Handed bool `json:"handed,omitempty"`
}

// DeviceImage is the session's state on one device.
type DeviceImage struct {
	Allocs  map[uint64]uint64         `json:"allocs"` // the program's allocations: ptr -> bytes
	Used    uint64                    `json:"used"`
	Blas    map[backend.Handle]uint64 `json:"blas,omitempty"` // handle -> the worker's workspace
	Context *backend.ContextImage     `json:"context"`
}

// imageWriter writes an image's records.
type imageWriter struct {
	w   *bufio.Writer
	hdr [17]byte
}

func newImageWriter(w io.Writer) *imageWriter { return &imageWriter{w: bufio.NewWriterSize(w, 1<<20)} }

func (iw *imageWriter) data(dev int, addr uint64, b []byte) error {
	for len(b) > 0 {
		n := min(len(b), imageChunk)
		iw.hdr[0] = 'D'
		binary.LittleEndian.PutUint32(iw.hdr[1:], uint32(dev))
		binary.LittleEndian.PutUint64(iw.hdr[5:], addr)
		binary.LittleEndian.PutUint32(iw.hdr[13:], uint32(n))
		if _, err := iw.w.Write(iw.hdr[:17]); err != nil {
			return err
		}
		if _, err := iw.w.Write(b[:n]); err != nil {
			return err
		}
		b, addr = b[n:], addr+uint64(n)
	}
	return nil
}

func (iw *imageWriter) image(img *SessionImage) error {
	b, err := json.Marshal(img)
	if err != nil {
		return fmt.Errorf("encoding the session image: %w", err)
	}
	iw.hdr[0] = 'I'
	binary.LittleEndian.PutUint32(iw.hdr[1:], uint32(len(b)))
	if _, err := iw.w.Write(iw.hdr[:5]); err != nil {
		return err
	}
	_, err = iw.w.Write(b)
	return err
}

func (iw *imageWriter) offer(o *memoryOffer) error {
	b, err := json.Marshal(o)
	if err != nil {
		return err
	}
	iw.hdr[0] = 'H'
	binary.LittleEndian.PutUint32(iw.hdr[1:], uint32(len(b)))
	if _, err := iw.w.Write(iw.hdr[:5]); err != nil {
		return err
	}
	_, err = iw.w.Write(b)
	return err
}

func (iw *imageWriter) end() error {
	if err := iw.w.WriteByte('E'); err != nil {
		return err
	}
	return iw.w.Flush()
}

func (iw *imageWriter) flush() error { return iw.w.Flush() }

// imageChunkRec is one 'D' record read.
type imageChunkRec struct {
	dev  int
	addr uint64
	data []byte
}

// chunkKey is where a contents record writes.
type chunkKey struct {
	dev  int
	addr uint64
	n    uint32
}

// readImage reads an image's records to the end: the image and every contents record, in order.
// A stream without exactly one image, or a record past its bounds, is refused naming it.
func readImage(r io.Reader) (*SessionImage, []imageChunkRec, error) {
	return readImageWith(r, nil)
}

// maxOffer bounds a memory offer's record.
const maxOffer = 64 << 10

// readImageWith is readImage that hands a memory offer, if the stream starts with one, to
// onOffer as soon as it is read (nil: ignored).
func readImageWith(r io.Reader, onOffer func(*memoryOffer)) (*SessionImage, []imageChunkRec, error) {
	br := bufio.NewReaderSize(r, 1<<20)
	first := true
	var img *SessionImage
	var chunks []imageChunkRec
	seen := map[chunkKey]int{}
	for {
		kind, err := br.ReadByte()
		if err != nil {
			return nil, nil, fmt.Errorf("session image: record kind: %w", noEOF(err))
		}
		wasFirst := first
		first = false
		switch kind {
		case 'H':
			var h [4]byte
			if _, err := io.ReadFull(br, h[:]); err != nil {
				return nil, nil, fmt.Errorf("session image: memory offer header: %w", noEOF(err))
			}
			n := binary.LittleEndian.Uint32(h[:])
			if !wasFirst || n > maxOffer {
				return nil, nil, fmt.Errorf("session image: a memory offer of %d bytes not first in the stream", n)
			}
			b := make([]byte, n)
			if _, err := io.ReadFull(br, b); err != nil {
				return nil, nil, fmt.Errorf("session image: memory offer: %w", noEOF(err))
			}
			var o memoryOffer
			if err := json.Unmarshal(b, &o); err != nil {
				return nil, nil, fmt.Errorf("session image: decoding the memory offer: %w", err)
			}
			if onOffer != nil {
				onOffer(&o)
			}
		case 'D':
			var h [16]byte
			if _, err := io.ReadFull(br, h[:]); err != nil {
				return nil, nil, fmt.Errorf("session image: contents record header: %w", noEOF(err))
			}
			n := binary.LittleEndian.Uint32(h[12:])
			if n == 0 || n > imageChunk {
				return nil, nil, fmt.Errorf("session image: contents record of %d bytes (at most %d)", n, imageChunk)
			}
			key := chunkKey{int(binary.LittleEndian.Uint32(h[0:])), binary.LittleEndian.Uint64(h[4:]), n}
			// A piece sent again (a migration's later round) replaces the earlier one in place:
			// the reader holds each byte once, however many rounds sent it.
			i, again := seen[key]
			if !again {
				i = len(chunks)
				seen[key] = i
				chunks = append(chunks, imageChunkRec{dev: key.dev, addr: key.addr, data: make([]byte, n)})
			}
			if _, err := io.ReadFull(br, chunks[i].data); err != nil {
				return nil, nil, fmt.Errorf("session image: contents of %#x: %w", key.addr, noEOF(err))
			}
		case 'I':
			var h [4]byte
			if _, err := io.ReadFull(br, h[:]); err != nil {
				return nil, nil, fmt.Errorf("session image: image record header: %w", noEOF(err))
			}
			n := binary.LittleEndian.Uint32(h[:])
			if img != nil || n > maxImageJSON {
				return nil, nil, fmt.Errorf("session image: a second image record, or one of %d bytes", n)
			}
			// Read as it comes, not allocated from the claimed length: a short stream claiming a
			// large record costs what it sent.
			var rec bytes.Buffer
			if got, err := rec.ReadFrom(io.LimitReader(br, int64(n))); err != nil || got != int64(n) {
				return nil, nil, fmt.Errorf("session image: image record of %d bytes ends at %d: %w", n, got, noEOF(cmp.Or(err, io.EOF)))
			}
			b := rec.Bytes()
			img = &SessionImage{}
			if err := json.Unmarshal(b, img); err != nil {
				return nil, nil, fmt.Errorf("session image: decoding the image: %w", err)
			}
		case 'E':
			if img == nil {
				return nil, nil, errors.New("session image: ends without an image record")
			}
			return img, chunks, img.check(chunks)
		default:
			return nil, nil, fmt.Errorf("session image: unknown record kind %#x", kind)
		}
	}
}

func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// check refuses an image that does not hang together: its version, devices, and contents that
// fall outside its regions.
func (img *SessionImage) check(chunks []imageChunkRec) error {
	if img.Version != ImageVersion {
		return fmt.Errorf("session image: version %d, this worker reads %d", img.Version, ImageVersion)
	}
	if len(img.Devices) > maxImageDevices {
		return fmt.Errorf("session image: %d devices, at most %d", len(img.Devices), maxImageDevices)
	}
	if img.Current < 0 || img.Current >= max(len(img.Devices), 1) {
		return fmt.Errorf("session image: current device %d of %d", img.Current, len(img.Devices))
	}
	for i, d := range img.Devices {
		if d != nil && d.Context == nil {
			return fmt.Errorf("session image: device %d without its context", i)
		}
	}
	for _, d := range img.Devices {
		if d != nil {
			sort.Slice(d.Context.Regions, func(i, j int) bool { return d.Context.Regions[i].Addr < d.Context.Regions[j].Addr })
		}
	}
	for _, c := range chunks {
		if c.dev < 0 || c.dev >= len(img.Devices) || img.Devices[c.dev] == nil {
			return fmt.Errorf("session image: contents for device %d, which the image does not hold", c.dev)
		}
		if !inRegions(img.Devices[c.dev].Context.Regions, c.addr, uint64(len(c.data))) {
			return fmt.Errorf("session image: contents at %#x (%d bytes) on device %d lie outside its regions", c.addr, len(c.data), c.dev)
		}
	}
	return nil
}

// inRegions says whether [addr, addr+n) lies inside one region.
func inRegions(regions []backend.Region, addr, n uint64) bool {
	i := sort.Search(len(regions), func(i int) bool { return regions[i].Addr > addr }) - 1
	if i < 0 {
		return false
	}
	r := regions[i]
	return addr-r.Addr <= r.Bytes && n <= r.Bytes-(addr-r.Addr)
}

// secretOrNew is the grant the guest resumes the restored session with: a fresh secret for a
// migration (the guest learns it from MigrateRedirect), the kept one for a checkpoint's restore.
func (img *SessionImage) secretOrNew(fresh bool) ([]byte, uint32) {
	if img == nil {
		return nil, 0
	}
	if fresh {
		return newSecret(), img.WindowMs
	}
	return img.Secret, img.WindowMs
}
