package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gpucloud/api"
	"gpucloud/gpuserverd/usage"
)

// ackedFile holds the id of the last usage record the apiserver acknowledged, so a restarted
// gpuserverd resumes after it. Re-sending a record is harmless (billing ingests each id once);
// the cursor only keeps restarts from re-sending the whole log.
const ackedFile = "usage.acked"

// ShipUsage pushes the usage log to the apiserver's POST /v1/agent/usage every period until ctx
// ends, from the record after the last acknowledged one. A batch that fails in transport or with
// a 5xx is sent again next time; records the apiserver refuses one by one are logged and passed
// (sending them again cannot fix them).
func (s *Server) ShipUsage(ctx context.Context, hb Heartbeat, period time.Duration) {
	client := &http.Client{Timeout: 30 * time.Second}
	for {
		if _, err := s.ShipOnce(ctx, client, hb); err != nil && ctx.Err() == nil {
			s.log.Warn("shipping usage records failed; will retry", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(period):
		}
	}
}

// ShipOnce sends every record not yet acknowledged, in pages, and returns how many were sent.
func (s *Server) ShipOnce(ctx context.Context, client *http.Client, hb Heartbeat) (int, error) {
	cursor, err := s.ackedCursor()
	if err != nil {
		return 0, err
	}
	sent := 0
	for {
		recs, err := s.usage.After(cursor)
		if errors.Is(err, usage.ErrUnknownID) {
			// The log no longer holds the cursor's record (a new data dir): start over; billing
			// drops what it already has.
			s.log.Warn("usage cursor names a record the log lacks; sending the whole log", "cursor", cursor)
			cursor = ""
			continue
		}
		if err != nil || len(recs) == 0 {
			return sent, err
		}
		res, err := postUsage(ctx, client, hb, recs)
		if err != nil {
			return sent, err
		}
		for _, rej := range res.Rejected {
			s.log.Error("apiserver refused a usage record", "id", rej.ID, "reason", rej.Reason)
		}
		cursor = recs[len(recs)-1].ID
		if err := s.saveCursor(cursor); err != nil {
			return sent, err
		}
		sent += len(recs)
	}
}

func (s *Server) ackedCursor() (string, error) {
	b, err := os.ReadFile(filepath.Join(s.cfg.DataDir, ackedFile))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("usage cursor: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// saveCursor writes the cursor aside and renames it into place, so a crash leaves the old or the
// new one, never half of one.
func (s *Server) saveCursor(id string) error {
	path := filepath.Join(s.cfg.DataDir, ackedFile)
	if err := os.WriteFile(path+".tmp", []byte(id+"\n"), 0o600); err != nil {
		return fmt.Errorf("usage cursor: %w", err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return fmt.Errorf("usage cursor: %w", err)
	}
	return nil
}

// postUsage sends a batch in the binary usage form (decoding it costs the apiserver an eighth of
// JSON's CPU), and as JSON again if the apiserver refuses the form itself (400 or 415: one from
// before the form, during an upgrade). A refused binary body stores nothing, so nothing doubles.
func postUsage(ctx context.Context, client *http.Client, hb Heartbeat, recs []api.UsageRecord) (api.UsageBatchResult, error) {
	var res api.UsageBatchResult
	err := postBody(ctx, client, hb, "/v1/agent/usage", api.UsageBatchBinary, api.AppendUsageBatch(nil, recs), &res)
	var se *StatusError
	if errors.As(err, &se) && (se.Code == http.StatusBadRequest || se.Code == http.StatusUnsupportedMediaType) {
		err = postJSON(ctx, client, hb, "/v1/agent/usage", api.UsageBatch{Records: recs}, &res)
	}
	return res, err
}
