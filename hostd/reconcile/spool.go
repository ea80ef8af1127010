package reconcile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"gpucloud/api"
	"gpucloud/internal/jsonlines"
)

// spoolFile holds, one JSON line each, the VM usage records the apiserver has not acknowledged,
// so a hostd killed while the apiserver is unreachable still bills them after it restarts.
// Records are idempotent by id, so one sent and acknowledged just before a crash, and sent
// again after it, is billed once.
const spoolFile = "usage.spool"

// spool is the fsync'd, append-only file behind usageQueue.pending.
type spool struct {
	path string
	f    *os.File
}

// openSpool opens (or creates) the spool in dir and returns the records it holds. A torn last
// line, left by a crash mid-append, is cut off; any other bad line is an error naming it.
func openSpool(dir string) (*spool, []api.UsageRecord, error) {
	path := filepath.Join(dir, spoolFile)
	f, recs, err := jsonlines.Open(path, 0o600, "a VM usage record", validSpooled)
	if err != nil {
		return nil, nil, fmt.Errorf("usage spool %s: %w", path, err)
	}
	return &spool{path: path, f: f}, recs, nil
}

// readSpool reads complete lines and returns their records and the offset after the last one.
func readSpool(r io.Reader) ([]api.UsageRecord, int64, error) {
	return jsonlines.Read(r, "a VM usage record", validSpooled)
}

func validSpooled(r *api.UsageRecord) bool { return r.ID != "" && r.Kind == api.UsageVM }

// add appends rec and fsyncs before returning.
func (s *spool) add(rec api.UsageRecord) error {
	if err := jsonlines.Append(s.f, rec); err != nil {
		return fmt.Errorf("usage spool: %w", err)
	}
	return nil
}

// compact replaces the spool with recs (those still unacknowledged): written aside, fsync'd and
// renamed, so a crash leaves the old spool or the new one.
func (s *spool) compact(recs []api.UsageRecord) error {
	var b bytes.Buffer
	for _, rec := range recs {
		line, err := json.Marshal(rec)
		if err != nil {
			return fmt.Errorf("usage spool: encode: %w", err)
		}
		b.Write(append(line, '\n'))
	}
	tmp := s.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("usage spool: compact: %w", err)
	}
	_, err = f.Write(b.Bytes())
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = os.Rename(tmp, s.path)
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("usage spool: compact: %w", err)
	}
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		f.Close()
		return fmt.Errorf("usage spool: compact: %w", err)
	}
	old := s.f
	s.f = f // appends go to the new file; the old one is unlinked by the rename
	return old.Close()
}
