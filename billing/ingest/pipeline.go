package ingest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// pipeline writes several statements of one transaction to the server at once and reads their
// results after, so the fast path pays one round trip where one per statement (each COPY too)
// cost the client and the server a wakeup, a write and a read each. pgx offers no pipeline that
// holds COPY, so this speaks the protocol: simple queries (BEGIN, COPY ... FROM STDIN with its
// data, COMMIT) and extended ones with binary parameters and results, each followed by Sync. Every
// statement thus ends with a ReadyForQuery. After an error the server skips the rest of that
// statement (and drops the COPY data already sent), and the statements after it fail in the
// aborted transaction, so the first error is the one to report.
type pipeline struct {
	pg *pgconn.PgConn
	// out holds the messages queued, written to the connection at once, and is reused from batch
	// to batch: pgconn's own write buffer is dropped after each write over 1 KiB, which made
	// ~1.7 KB of garbage per record.
	out   *[]byte
	steps []pipelineStep
}

var pipelineBufs = sync.Pool{New: func() any { return new([]byte) }}

func newPipeline(pg *pgconn.PgConn) *pipeline {
	out := pipelineBufs.Get().(*[]byte)
	*out = (*out)[:0]
	return &pipeline{pg: pg, out: out}
}

// release returns the pipeline's buffer; the pipeline is not used after.
func (p *pipeline) release() { pipelineBufs.Put(p.out) }

// send queues msg (encoding a frontend message cannot fail).
func (p *pipeline) send(msg pgproto3.FrontendMessage) {
	*p.out, _ = msg.Encode(*p.out)
}

type pipelineStep struct {
	name string
	row  func(values [][]byte) error // each result row, when the statement returns rows
}

// Array element types (pg_type oids).
const (
	oidUUID = 2950
	oidDate = 1082
)

var binaryFormat = []int16{1}

// query queues a statement without parameters.
func (p *pipeline) query(name, sql string) {
	p.send(&pgproto3.Query{String: sql})
	p.steps = append(p.steps, pipelineStep{name: name})
}

// copyIn queues COPY ... FROM STDIN and its data (copied: data may be reused after).
func (p *pipeline) copyIn(name, sql string, data []byte) {
	p.send(&pgproto3.Query{String: sql})
	p.send(&pgproto3.CopyData{Data: data})
	p.send(&pgproto3.CopyDone{})
	p.steps = append(p.steps, pipelineStep{name: name})
}

// exec queues the prepared statement name with binary parameters; row, when not nil, gets each
// result row's values (binary; valid only during the call).
func (p *pipeline) exec(name string, params [][]byte, row func([][]byte) error) {
	p.send(&pgproto3.Bind{PreparedStatement: name, ParameterFormatCodes: binaryFormat, Parameters: params, ResultFormatCodes: binaryFormat})
	p.send(&pgproto3.Execute{})
	p.send(&pgproto3.Sync{})
	p.steps = append(p.steps, pipelineStep{name: name, row: row})
}

// run sends what was queued and reads every statement's results. It returns the first
// statement's error (a *pgconn.PgError inside, for errors.As); a connection that failed to write
// or read is closed, its state unknown.
func (p *pipeline) run(ctx context.Context) error {
	steps := p.steps
	p.steps = nil
	// ctx bounds the whole exchange through the connection's deadline, set once: pgconn's own
	// context watching costs a goroutine per message read.
	conn := p.pg.Conn()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl) //nolint:errcheck // a failed read or write reports it
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) }) //nolint:errcheck // as above
	defer func() {
		if stop() {
			conn.SetDeadline(time.Time{}) //nolint:errcheck // as above
		}
	}()
	// Straight to the socket: pgconn has nothing buffered to write (its calls return only when
	// done) and reads through its own buffer after.
	if _, err := conn.Write(*p.out); err != nil {
		p.pg.Close(context.WithoutCancel(ctx)) //nolint:errcheck // broken already
		return fmt.Errorf("send: %w", deadlineErr(ctx, err))
	}
	var first error
	for i := 0; i < len(steps); {
		msg, err := p.pg.ReceiveMessage(context.Background()) //nolint:contextcheck // ctx is watched above
		if err != nil {
			p.pg.Close(context.WithoutCancel(ctx)) //nolint:errcheck // mid-protocol: unusable
			return fmt.Errorf("%s: %w", steps[i].name, deadlineErr(ctx, err))
		}
		switch m := msg.(type) {
		case *pgproto3.ErrorResponse:
			if first == nil {
				first = fmt.Errorf("%s: %w", steps[i].name, pgconn.ErrorResponseToPgError(m))
			}
		case *pgproto3.DataRow:
			if first == nil && steps[i].row != nil {
				if err := steps[i].row(m.Values); err != nil {
					first = fmt.Errorf("%s: %w", steps[i].name, err)
				}
			}
		case *pgproto3.ReadyForQuery:
			i++
		}
	}
	return first
}

// deadlineErr is ctx's error when the connection's deadline set from it ended err's read or
// write (the socket's deadline may pass before ctx notices its own), else err.
func deadlineErr(ctx context.Context, err error) error {
	if dl, ok := ctx.Deadline(); ctx.Err() != nil || ok && !time.Now().Before(dl) {
		if cause := context.Cause(ctx); cause != nil {
			return cause
		}
		return context.DeadlineExceeded
	}
	return err
}

// binaryArray encodes a one-dimensional array without nulls of n elements of type oid, each
// written by elem, in PostgreSQL's binary array format.
func binaryArray(oid uint32, n int, elem func(b []byte, i int) []byte) []byte {
	b := make([]byte, 0, 20+n*20)
	b = binary.BigEndian.AppendUint32(b, 1) // dimensions
	b = binary.BigEndian.AppendUint32(b, 0) // no nulls
	b = binary.BigEndian.AppendUint32(b, oid)
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	b = binary.BigEndian.AppendUint32(b, 1) // lower bound
	for i := 0; i < n; i++ {
		b = elem(b, i)
	}
	return b
}

func uuidArray(ids [][16]byte) []byte {
	return binaryArray(oidUUID, len(ids), func(b []byte, i int) []byte {
		b = binary.BigEndian.AppendUint32(b, 16)
		return append(b, ids[i][:]...)
	})
}

// pgDays is t's UTC day as PostgreSQL's binary date: days since 2000-01-01.
func pgDays(t time.Time) int32 {
	d := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	return int32(d.Sub(pgEpoch) / (24 * time.Hour))
}

func binaryDate(t time.Time) []byte { return binary.BigEndian.AppendUint32(nil, uint32(pgDays(t))) }

// dateArray is a date[] of n days, day(i) each (pgDays).
func dateArray(n int, day func(i int) int32) []byte {
	return binaryArray(oidDate, n, func(b []byte, i int) []byte {
		b = binary.BigEndian.AppendUint32(b, 4)
		return binary.BigEndian.AppendUint32(b, uint32(day(i)))
	})
}

// readDate reads a binary date value.
func readDate(v []byte) (time.Time, error) {
	if len(v) != 4 {
		return time.Time{}, errors.New("a date of other than 4 bytes")
	}
	return pgEpoch.AddDate(0, 0, int(int32(binary.BigEndian.Uint32(v)))), nil
}
