// Package wire is the framing and messages spoken between the guest library and gpuserverd.
// The messages are generated from spec/messages.spec (see gen/), for Go here and for C in the
// guest library, so both sides share one definition.
package wire

//go:generate go run ./gen -spec spec/messages.spec -go messages_gen.go -c ../guest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Type identifies a message.
type Type uint16

func (t Type) String() string {
	if n, ok := typeNames[t]; ok {
		return n
	}
	return fmt.Sprintf("Type(%d)", uint16(t))
}

// Message is one generated message type.
type Message interface {
	Type() Type
	Append(b []byte) []byte
	Decode(p []byte) error
}

// Header precedes every payload.
type Header struct {
	Length  uint32
	Type    Type
	Flags   uint16
	Request uint32
}

// ErrDecode is wrapped by every decoding error; the message names the field.
var ErrDecode = errors.New("wire: bad message")

// ParseHeader decodes and checks a frame header.
func ParseHeader(b []byte) (Header, error) {
	h := Header{
		Length:  binary.LittleEndian.Uint32(b[0:]),
		Type:    Type(binary.LittleEndian.Uint16(b[4:])),
		Flags:   binary.LittleEndian.Uint16(b[6:]),
		Request: binary.LittleEndian.Uint32(b[8:]),
	}
	if h.Length > MaxFrame {
		return h, fmt.Errorf("%w: frame of %s: payload length %d exceeds limit %d", ErrDecode, h.Type, h.Length, MaxFrame)
	}
	if _, ok := typeNames[h.Type]; !ok {
		return h, fmt.Errorf("%w: unknown message type %d", ErrDecode, uint16(h.Type))
	}
	return h, nil
}

// AppendHeader appends a header for a payload of n bytes.
func AppendHeader(b []byte, t Type, flags uint16, req uint32, n int) []byte {
	b = putU32(b, uint32(n))
	b = binary.LittleEndian.AppendUint16(b, uint16(t))
	b = binary.LittleEndian.AppendUint16(b, flags)
	return putU32(b, req)
}

// AppendFrame appends m as a whole frame.
func AppendFrame(b []byte, m Message, flags uint16, req uint32) []byte {
	start := len(b)
	b = AppendHeader(b, m.Type(), flags, req, 0)
	b = m.Append(b)
	binary.LittleEndian.PutUint32(b[start:], uint32(len(b)-start-HeaderSize))
	return b
}

// ReadFrame reads one frame into buf (grown when too small) and returns its header and payload.
func ReadFrame(r io.Reader, buf []byte) (Header, []byte, error) {
	var hb [HeaderSize]byte
	if _, err := io.ReadFull(r, hb[:]); err != nil {
		return Header{}, nil, err
	}
	h, err := ParseHeader(hb[:])
	if err != nil {
		return h, nil, err
	}
	if cap(buf) < int(h.Length) {
		buf = make([]byte, h.Length)
	}
	buf = buf[:h.Length]
	if _, err := io.ReadFull(r, buf); err != nil {
		return h, nil, fmt.Errorf("wire: reading %d-byte %s payload: %w", h.Length, h.Type, err)
	}
	return h, buf, nil
}

// Decode decodes a payload of type t.
func Decode(t Type, p []byte) (Message, error) {
	m := New(t)
	if m == nil {
		return nil, fmt.Errorf("%w: unknown message type %d", ErrDecode, uint16(t))
	}
	if err := m.Decode(p); err != nil {
		return nil, err
	}
	return m, nil
}

func putU32(b []byte, v uint32) []byte { return binary.LittleEndian.AppendUint32(b, v) }
func putU64(b []byte, v uint64) []byte { return binary.LittleEndian.AppendUint64(b, v) }

// decoder reads fields in order and keeps the first error, which names message and field.
type decoder struct {
	p   []byte
	msg string
	err error
}

func (d *decoder) need(field string, n uint64) bool {
	if d.err != nil {
		return false
	}
	if uint64(len(d.p)) < n {
		d.err = fmt.Errorf("%w: %s.%s: truncated: need %d bytes, have %d", ErrDecode, d.msg, field, n, len(d.p))
		return false
	}
	return true
}

func (d *decoder) u32(field string) uint32 {
	if !d.need(field, 4) {
		return 0
	}
	v := binary.LittleEndian.Uint32(d.p)
	d.p = d.p[4:]
	return v
}

func (d *decoder) u64(field string) uint64 {
	if !d.need(field, 8) {
		return 0
	}
	v := binary.LittleEndian.Uint64(d.p)
	d.p = d.p[8:]
	return v
}

func (d *decoder) count(field string, limit int) (int, bool) {
	n := d.u32(field)
	if d.err != nil {
		return 0, false
	}
	if uint64(n) > uint64(limit) {
		d.err = fmt.Errorf("%w: %s.%s: length %d exceeds limit %d", ErrDecode, d.msg, field, n, limit)
		return 0, false
	}
	return int(n), true
}

func (d *decoder) bytes(field string, limit int) []byte {
	n, ok := d.count(field, limit)
	if !ok || !d.need(field, uint64(n)) {
		return nil
	}
	v := d.p[:n:n]
	d.p = d.p[n:]
	return v
}

func (d *decoder) u32s(field string, limit int) []uint32 {
	n, ok := d.count(field, limit)
	if !ok || !d.need(field, 4*uint64(n)) {
		return nil
	}
	v := make([]uint32, n)
	for i := range v {
		v[i] = binary.LittleEndian.Uint32(d.p[4*i:])
	}
	d.p = d.p[4*n:]
	return v
}

func (d *decoder) finish() error {
	if d.err == nil && len(d.p) != 0 {
		d.err = fmt.Errorf("%w: %s: %d unexpected trailing bytes", ErrDecode, d.msg, len(d.p))
	}
	return d.err
}

// StreamNamer is a message that names a stream: the worker resolves a guest's per-thread default
// stream (PerThreadStream) through it before the message reaches the backend.
type StreamNamer interface {
	StreamField() *uint64
}

// PerThreadStream tags a stream handle that names a guest thread's per-thread default stream
// (CU_STREAM_PER_THREAD, the _ptsz entry points): the low bits number the guest's thread; the
// worker creates the stream on its first use.
const PerThreadStream = uint64(1) << 63
