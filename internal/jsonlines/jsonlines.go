// Package jsonlines is the durable append-only file both daemons keep usage records in
// (gpuserverd's usage log, hostd's unsent-usage spool): one JSON value per line, each append
// fsync'd before it counts, and a torn last line — a crash mid-append — cut off on open.
package jsonlines

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// Read decodes the complete lines of r and returns them with the offset after the last one.
// A final line without its newline is a torn append and is left out; any other line that does not
// decode, or that valid refuses, is an error naming the line and what was expected ("a usage
// record").
func Read[T any](r io.Reader, what string, valid func(*T) bool) ([]T, int64, error) {
	br := bufio.NewReader(r)
	var out []T
	var off int64
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return out, off, nil
		}
		if err != nil {
			return nil, 0, err
		}
		var v T
		if err := json.Unmarshal(bytes.TrimSpace(line), &v); err != nil || !valid(&v) {
			return nil, 0, fmt.Errorf("line %d is not %s: %v", n, what, err)
		}
		out = append(out, v)
		off += int64(len(line))
	}
}

// Open opens (or creates) the file at path, reads it with Read, cuts a torn tail off and leaves
// the file positioned for appends.
func Open[T any](path string, perm os.FileMode, what string, valid func(*T) bool) (*os.File, []T, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, perm)
	if err != nil {
		return nil, nil, err
	}
	vals, good, err := Read(f, what, valid)
	if err == nil {
		if err = f.Truncate(good); err != nil {
			err = fmt.Errorf("truncating torn tail: %w", err)
		}
	}
	if err == nil {
		_, err = f.Seek(good, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, vals, nil
}

// Append writes v as one line and fsyncs before returning.
func Append(f *os.File, v any) error {
	line, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("append: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync: %w", err)
	}
	return nil
}
