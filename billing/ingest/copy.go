package ingest

import (
	"encoding/binary"
	"time"
)

// copyBuf writes rows in PostgreSQL's binary COPY format straight from the records: no per-value
// interface boxing, no array encoding, one buffer reused per batch. Each row is a field count, then
// each field as a length and its binary value (see the COPY reference, "Binary Format").
type copyBuf struct{ b []byte }

// pgEpoch is where PostgreSQL's binary timestamps (microseconds) and dates (days) count from.
var pgEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

func (c *copyBuf) reset() {
	c.b = append(c.b[:0], "PGCOPY\n\xff\r\n\x00"...)
	c.b = binary.BigEndian.AppendUint32(c.b, 0) // flags
	c.b = binary.BigEndian.AppendUint32(c.b, 0) // header extension length
}

func (c *copyBuf) row(fields int) { c.b = binary.BigEndian.AppendUint16(c.b, uint16(fields)) }

func (c *copyBuf) text(s string) {
	c.b = binary.BigEndian.AppendUint32(c.b, uint32(len(s)))
	c.b = append(c.b, s...)
}

func (c *copyBuf) uuid(u [16]byte) {
	c.b = binary.BigEndian.AppendUint32(c.b, 16)
	c.b = append(c.b, u[:]...)
}

func (c *copyBuf) int32(v int32) {
	c.b = binary.BigEndian.AppendUint32(c.b, 4)
	c.b = binary.BigEndian.AppendUint32(c.b, uint32(v))
}

func (c *copyBuf) int64(v int64) {
	c.b = binary.BigEndian.AppendUint32(c.b, 8)
	c.b = binary.BigEndian.AppendUint64(c.b, uint64(v))
}

func (c *copyBuf) bool(v bool) {
	c.b = binary.BigEndian.AppendUint32(c.b, 1)
	if v {
		c.b = append(c.b, 1)
	} else {
		c.b = append(c.b, 0)
	}
}

// timestamptz writes t as microseconds since 2000-01-01 UTC (Validate truncated it to ms).
func (c *copyBuf) timestamptz(t time.Time) { c.int64(t.Sub(pgEpoch).Microseconds()) }

// date writes the UTC day of t as days since 2000-01-01.
func (c *copyBuf) date(t time.Time) { c.int32(pgDays(t)) }

// bytes ends the data (the -1 trailer) and returns it, valid until the next reset.
func (c *copyBuf) bytes() []byte {
	c.b = binary.BigEndian.AppendUint16(c.b, 0xffff)
	return c.b
}
