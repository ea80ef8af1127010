// Package usage is gpuserverd's durable log of usage records: one JSON line per record, fsync'd
// before the append returns, read back on start so ids keep growing and billing can pull
// everything after the last record it has.
package usage

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"gpucloud/api"
)

// FileName is the log's name in the data directory.
const FileName = "usage.jsonl"

// MaxPage bounds the records one After call returns.
const MaxPage = 1000

// ErrUnknownID is returned by After for an id the log never held.
var ErrUnknownID = errors.New("unknown usage record id")

// Log is an append-only, fsync'd record log.
type Log struct {
	mu      sync.Mutex
	f       *os.File
	records []api.UsageRecord
	index   map[string]int
}

// Open opens (or creates) the log in dir. A torn last line, left by a crash mid-append, is cut off.
func Open(dir string) (*Log, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("usage: data dir: %w", err)
	}
	path := filepath.Join(dir, FileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("usage: open log: %w", err)
	}
	l := &Log{f: f, index: map[string]int{}}
	good, err := l.load(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("usage: %s: %w", path, err)
	}
	if err := f.Truncate(good); err != nil {
		f.Close()
		return nil, fmt.Errorf("usage: truncating torn tail: %w", err)
	}
	if _, err := f.Seek(good, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return l, nil
}

// load reads complete lines and returns the offset after the last good one.
func (l *Log) load(r io.Reader) (int64, error) {
	br := bufio.NewReader(r)
	var off int64
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return off, nil // a partial line without its newline is a torn append
		}
		if err != nil {
			return 0, err
		}
		var rec api.UsageRecord
		if err := json.Unmarshal(bytes.TrimSpace(line), &rec); err != nil || rec.ID == "" {
			return 0, fmt.Errorf("line %d is not a usage record: %v", n, err)
		}
		l.index[rec.ID] = len(l.records)
		l.records = append(l.records, rec)
		off += int64(len(line))
	}
}

// Next returns the sequence number the next record should carry in its id.
func (l *Log) Next() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.records) + 1
}

// Append writes rec durably; build gives the record its final form from its sequence number.
func (l *Log) Append(build func(seq int) api.UsageRecord) (api.UsageRecord, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rec := build(len(l.records) + 1)
	if _, dup := l.index[rec.ID]; dup || rec.ID == "" {
		return rec, fmt.Errorf("usage: record id %q empty or already logged", rec.ID)
	}
	line, err := json.Marshal(rec)
	if err != nil {
		return rec, fmt.Errorf("usage: encode: %w", err)
	}
	if _, err := l.f.Write(append(line, '\n')); err != nil {
		return rec, fmt.Errorf("usage: append: %w", err)
	}
	if err := l.f.Sync(); err != nil {
		return rec, fmt.Errorf("usage: fsync: %w", err)
	}
	l.index[rec.ID] = len(l.records)
	l.records = append(l.records, rec)
	return rec, nil
}

// After returns up to MaxPage records logged after the one with id ("" = from the start).
func (l *Log) After(id string) ([]api.UsageRecord, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	start := 0
	if id != "" {
		i, ok := l.index[id]
		if !ok {
			return nil, fmt.Errorf("%w: %q", ErrUnknownID, id)
		}
		start = i + 1
	}
	end := min(len(l.records), start+MaxPage)
	return append([]api.UsageRecord{}, l.records[start:end]...), nil
}

// Len is the number of records logged.
func (l *Log) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.records)
}

// Close closes the file.
func (l *Log) Close() error { return l.f.Close() }
