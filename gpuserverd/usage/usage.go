// Package usage is gpuserverd's durable log of usage records: one JSON line per record, fsync'd
// before the append returns, read back on start so ids keep growing and billing can pull
// everything after the last record it has.
package usage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"gpucloud/api"
	"gpucloud/internal/jsonlines"
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
	f, recs, err := jsonlines.Open(path, 0o640, "a usage record", func(r *api.UsageRecord) bool { return r.ID != "" })
	if err != nil {
		return nil, fmt.Errorf("usage: %s: %w", path, err)
	}
	l := &Log{f: f, records: recs, index: make(map[string]int, len(recs))}
	for i, rec := range recs {
		l.index[rec.ID] = i
	}
	return l, nil
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
	if err := jsonlines.Append(l.f, rec); err != nil {
		return rec, fmt.Errorf("usage: %w", err)
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
