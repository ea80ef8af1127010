package store

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// StaleSessions returns the sessions among those a GPU server reports that no live instance on
// it holds: a session's id is its instance's id (the apiserver mints tokens that way), so a
// session of a deleted instance, of an instance placed elsewhere, or with an id that names no
// instance, must end. A session a drain is moving here (an open move to this server) is kept.
func (s *Store) StaleSessions(ctx context.Context, gpuServer uuid.UUID, sessions []string) ([]string, error) {
	if len(sessions) == 0 {
		return nil, nil
	}
	rows, err := s.Pool.Query(ctx, `SELECT sid FROM unnest($2::text[]) AS sid WHERE NOT EXISTS (
		SELECT 1 FROM instances i WHERE i.id::text = sid AND i.gpu_server_id = $1 AND i.state NOT IN ('deleting', 'deleted') AND i.released_at IS NULL)
		AND NOT EXISTS (SELECT 1 FROM gpu_server_moves m WHERE m.instance_id::text = sid AND m.target_id = $1 AND m.state IN ('pending', 'moving'))`,
		gpuServer, sessions)
	if err != nil {
		return nil, fmt.Errorf("stale sessions: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("stale sessions: %w", err)
	}
	return out, nil
}
