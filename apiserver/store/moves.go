package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"gpucloud/api"
	"gpucloud/apiserver/placement"
)

// A drain that moves work (issue 18; docs/gpuserverd/sessions.md): DrainMove plans, in one
// transaction, a move for each live GPU instance on a GPU server: a target GPU server with room
// under the placement rules, whose GPUs are reserved at once, or the reason there is none. The
// source's gpuserverd learns its open moves in its heartbeat's answer (OpenMoves), migrates the
// instance's sessions and reports (ReportMoves): done swaps the instance's reservations and
// gpu_server_id to the target; failed gives the target's reservation back.
//
// Tenant quotas count an instance's GPUs, not where they are, so a move leaves them as they are;
// the target's GPUs are held twice (source and target) only while the move is open.

// Move is one planned move as operators see it.
type Move struct {
	ID            uuid.UUID  `json:"id"`
	InstanceID    uuid.UUID  `json:"instance_id"`
	TenantID      uuid.UUID  `json:"tenant_id"`
	SourceID      uuid.UUID  `json:"source_id"`
	TargetID      *uuid.UUID `json:"target_id,omitempty"`
	State         string     `json:"state"`
	Reason        string     `json:"reason,omitempty"`
	SessionsMoved int        `json:"sessions_moved"`
	BytesCopied   int64      `json:"bytes_copied"`
	BytesTotal    int64      `json:"bytes_total"`
	PauseMs       float64    `json:"pause_ms"`
	CreatedAt     time.Time  `json:"created_at"`
	UpdatedAt     time.Time  `json:"updated_at"`
	FinishedAt    *time.Time `json:"finished_at,omitempty"`
}

// DrainStatus is a GPU server's drain: its moves, newest first, and the GPU instances still on it.
type DrainStatus struct {
	GPUServerID uuid.UUID      `json:"gpu_server_id"`
	Draining    bool           `json:"draining"`
	Remaining   int            `json:"remaining"` // live GPU instances still placed here
	Counts      map[string]int `json:"counts"`    // moves by state
	Moves       []Move         `json:"moves"`
}

// Finished says whether nothing is left to wait for: no move open and no instance placed here
// but those no target had room for (named in Moves with their reason).
func (d DrainStatus) Finished() bool {
	return d.Counts["pending"]+d.Counts["moving"] == 0
}

// maxMovesShown bounds the moves a drain status lists.
const maxMovesShown = 500

// liveOnServer selects the live GPU instances placed on $1.
const liveOnServer = `i.gpu_server_id = $1 AND i.state NOT IN ('deleting', 'deleted') AND i.released_at IS NULL AND i.gpu_count > 0`

// DrainMove cordons and drains a GPU server and plans a move for each of its live GPU instances
// that has no open move (one whose last move failed or found no room is planned again), all in one
// transaction. It returns the drain's status.
func (s *Store) DrainMove(ctx context.Context, gpuServer uuid.UUID) (DrainStatus, error) {
	err := s.InTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE gpu_servers SET cordoned = true, draining = true WHERE id = $1 AND deleted_at IS NULL`, gpuServer)
		if err != nil {
			return fmt.Errorf("drain gpu server: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		rows, err := tx.Query(ctx, `SELECT i.id, i.tenant_id, coalesce(it.gpu_model_id, '00000000-0000-0000-0000-000000000000'),
				i.gpu_count, i.tier, i.gpu_memory_bytes
			FROM instances i JOIN instance_types it ON it.id = i.instance_type_id
			WHERE `+liveOnServer+` AND NOT EXISTS (SELECT 1 FROM gpu_server_moves m
				WHERE m.instance_id = i.id AND m.state IN ('pending', 'moving'))
			ORDER BY i.id FOR UPDATE OF i`, gpuServer)
		if err != nil {
			return fmt.Errorf("drain: instances to move: %w", err)
		}
		type candidate struct {
			id, tenant uuid.UUID
			req        placement.Request
		}
		var todo []candidate
		for rows.Next() {
			var c candidate
			var tier string
			if err := rows.Scan(&c.id, &c.tenant, &c.req.GPUModelID, &c.req.GPUCount, &tier, &c.req.SliceBytes); err != nil {
				rows.Close()
				return fmt.Errorf("drain: instances to move: %w", err)
			}
			c.req.Dedicated = tier == "dedicated"
			todo = append(todo, c)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("drain: instances to move: %w", err)
		}
		planned := 0
		for _, c := range todo {
			if err := planMove(ctx, tx, gpuServer, c.id, c.req); err != nil {
				return err
			}
			planned++
		}
		return Audit(ctx, tx, uuid.Nil, "drain-move", "gpu-server", gpuServer.String(), map[string]int{"planned": planned})
	})
	if err != nil {
		return DrainStatus{}, err
	}
	return s.DrainStatus(ctx, gpuServer)
}

// planMove reserves GPUs for instance on another GPU server (the source is draining, so placement
// does not pick it) and records the move, or records it unplaced with placement's reason.
func planMove(ctx context.Context, tx pgx.Tx, source, instance uuid.UUID, req placement.Request) error {
	id := NewID()
	res, err := placement.PlaceGPUs(ctx, tx, req)
	if placement.IsNoCapacity(err) {
		_, err = tx.Exec(ctx, `INSERT INTO gpu_server_moves (id, instance_id, source_id, state, reason, finished_at)
			VALUES ($1, $2, $3, 'unplaced', $4, now())`, id, instance, source, err.Error())
		if err != nil {
			return fmt.Errorf("drain: record unplaced move of %s: %w", instance, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("drain: place %s: %w", instance, err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO gpu_server_moves (id, instance_id, source_id, target_id, state)
		VALUES ($1, $2, $3, $4, 'pending')`, id, instance, source, res.GPUServerID); err != nil {
		return fmt.Errorf("drain: record move of %s: %w", instance, err)
	}
	for _, g := range res.GPUs {
		if _, err := tx.Exec(ctx, `INSERT INTO gpu_server_move_gpus (move_id, gpu_id, bytes, dedicated) VALUES ($1, $2, $3, $4)`,
			id, g.ID, g.Bytes, req.Dedicated); err != nil {
			return fmt.Errorf("drain: record move of %s: %w", instance, err)
		}
	}
	return nil
}

const moveCols = `m.id, m.instance_id, i.tenant_id, m.source_id, m.target_id, m.state, m.reason, m.sessions_moved,
	m.bytes_copied, m.bytes_total, m.pause_ms, m.created_at, m.updated_at, m.finished_at`

// DrainStatus reads a GPU server's drain: the instances left and the moves from one snapshot (see
// HostDrainStatus).
func (s *Store) DrainStatus(ctx context.Context, gpuServer uuid.UUID) (DrainStatus, error) {
	d := DrainStatus{GPUServerID: gpuServer, Counts: map[string]int{}, Moves: []Move{}}
	err := s.InSnapshot(ctx, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `SELECT draining, (SELECT count(*) FROM instances i WHERE `+liveOnServer+`)
			FROM gpu_servers WHERE id = $1 AND deleted_at IS NULL`, gpuServer).Scan(&d.Draining, &d.Remaining)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("drain status: %w", err)
		}
		// Each instance's newest move: an instance planned again after a failure shows its retry.
		rows, err := tx.Query(ctx, `SELECT `+moveCols+` FROM (
				SELECT DISTINCT ON (instance_id) * FROM gpu_server_moves WHERE source_id = $1
				ORDER BY instance_id, created_at DESC, id) m
			JOIN instances i ON i.id = m.instance_id ORDER BY m.created_at DESC, m.id LIMIT $2`, gpuServer, maxMovesShown)
		if err != nil {
			return fmt.Errorf("drain status: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var m Move
			if err := rows.Scan(&m.ID, &m.InstanceID, &m.TenantID, &m.SourceID, &m.TargetID, &m.State, &m.Reason, &m.SessionsMoved,
				&m.BytesCopied, &m.BytesTotal, &m.PauseMs, &m.CreatedAt, &m.UpdatedAt, &m.FinishedAt); err != nil {
				return fmt.Errorf("drain status: %w", err)
			}
			d.Counts[m.State]++
			d.Moves = append(d.Moves, m)
		}
		return rows.Err()
	})
	return d, err
}

// OpenMove is a move the source must make, with what its target's session token needs.
type OpenMove struct {
	ID       uuid.UUID
	Placed   Placed // the instance as placed on the target: the token is minted from it
	TargetID uuid.UUID
	Endpoint string
}

// OpenMoves lists the pending and running moves off gpuServer. Moves whose instance was deleted
// meanwhile are failed first (their target reservation given back).
func (s *Store) OpenMoves(ctx context.Context, gpuServer uuid.UUID) ([]OpenMove, error) {
	rows, err := s.Pool.Query(ctx, `SELECT m.id FROM gpu_server_moves m JOIN instances i ON i.id = m.instance_id
		WHERE m.source_id = $1 AND m.state IN ('pending', 'moving') AND (i.state IN ('deleting', 'deleted') OR i.released_at IS NOT NULL)`, gpuServer)
	if err != nil {
		return nil, fmt.Errorf("open moves: %w", err)
	}
	gone, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, fmt.Errorf("open moves: %w", err)
	}
	for _, id := range gone {
		if _, err := s.ReportMove(ctx, gpuServer, api.MoveReport{MoveID: id.String(), State: api.MoveFailed,
			Reason: "the instance was deleted"}); err != nil {
			return nil, err
		}
	}
	rows, err = s.Pool.Query(ctx, `SELECT m.id, m.instance_id, i.tenant_id, i.tier, i.memory_quota, m.target_id, g.endpoint,
			(SELECT array_agg(u.uuid ORDER BY u.idx) FROM gpu_server_move_gpus r JOIN gpus u ON u.id = r.gpu_id WHERE r.move_id = m.id)
		FROM gpu_server_moves m JOIN instances i ON i.id = m.instance_id JOIN gpu_servers g ON g.id = m.target_id
		WHERE m.source_id = $1 AND m.state IN ('pending', 'moving') ORDER BY m.created_at, m.id`, gpuServer)
	if err != nil {
		return nil, fmt.Errorf("open moves: %w", err)
	}
	defer rows.Close()
	var out []OpenMove
	for rows.Next() {
		var o OpenMove
		p := &o.Placed
		if err := rows.Scan(&o.ID, &p.ID, &p.TenantID, &p.Tier, &p.MemoryQuota, &o.TargetID, &o.Endpoint, &p.GPUUUIDs); err != nil {
			return nil, fmt.Errorf("open moves: %w", err)
		}
		p.GPUServerID, p.Endpoint = &o.TargetID, o.Endpoint
		out = append(out, o)
	}
	return out, rows.Err()
}

// ErrNotYourMove is a report on a move that is not the reporting GPU server's own.
var ErrNotYourMove = errors.New("no such move off this GPU server")

// ReportMove applies the source's report on one of its moves and returns the move's state after
// it. A report on a finished move changes nothing (retries are idempotent); one on a move that is
// not gpuServer's own is ErrNotYourMove and changes nothing.
func (s *Store) ReportMove(ctx context.Context, gpuServer uuid.UUID, r api.MoveReport) (string, error) {
	id, err := uuid.Parse(r.MoveID)
	if err != nil {
		return "", fmt.Errorf("move_id %q: %w", r.MoveID, ErrNotYourMove)
	}
	var state string
	err = s.InTx(ctx, func(tx pgx.Tx) error {
		var instance uuid.UUID
		var target *uuid.UUID
		err := tx.QueryRow(ctx, `SELECT state, instance_id, target_id FROM gpu_server_moves WHERE id = $1 AND source_id = $2 FOR UPDATE`,
			id, gpuServer).Scan(&state, &instance, &target)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("move %s: %w", id, ErrNotYourMove)
		}
		if err != nil {
			return fmt.Errorf("move %s: %w", id, err)
		}
		if state != "pending" && state != "moving" {
			return nil // finished: a retried report
		}
		switch r.State {
		case api.MoveMoving:
			state = "moving"
			_, err = tx.Exec(ctx, `UPDATE gpu_server_moves SET state = 'moving', sessions_moved = $2, bytes_copied = $3,
				bytes_total = $4, pause_ms = $5, updated_at = now() WHERE id = $1`,
				id, r.SessionsMoved, int64(r.BytesCopied), int64(r.BytesTotal), r.PauseMs)
			if err != nil {
				return fmt.Errorf("move %s: %w", id, err)
			}
			return nil
		case api.MoveDone:
			var live bool
			if err := tx.QueryRow(ctx, `SELECT state NOT IN ('deleting', 'deleted') AND released_at IS NULL AND gpu_server_id = $2
				FROM instances WHERE id = $1 FOR UPDATE`, instance, gpuServer).Scan(&live); err != nil {
				return fmt.Errorf("move %s: instance: %w", id, err)
			}
			if live {
				state = "done"
				return finishMove(ctx, tx, id, instance, *target, r)
			}
			r.State, r.Reason = api.MoveFailed, "the instance was deleted while it moved"
		}
		state = "failed"
		return failMove(ctx, tx, id, instance, r)
	})
	return state, err
}

// finishMove swaps the instance's GPU reservations for the move's and places it on the target.
func finishMove(ctx context.Context, tx pgx.Tx, id, instance, target uuid.UUID, r api.MoveReport) error {
	steps := []struct {
		what string
		sql  string
		args []any
	}{
		{"release the source's GPUs", `UPDATE gpus SET reserved_bytes = gpus.reserved_bytes - r.bytes FROM gpu_reservations r
			WHERE r.instance_id = $1 AND gpus.id = r.gpu_id`, []any{instance}},
		{"release the source's GPUs", `DELETE FROM gpu_reservations WHERE instance_id = $1`, []any{instance}},
		{"take the target's GPUs", `INSERT INTO gpu_reservations (instance_id, gpu_id, bytes, dedicated)
			SELECT $1, gpu_id, bytes, dedicated FROM gpu_server_move_gpus WHERE move_id = $2`, []any{instance, id}},
		{"place on the target", `UPDATE instances SET gpu_server_id = $2, updated_at = now() WHERE id = $1`, []any{instance, target}},
		{"record", `UPDATE gpu_server_moves SET state = 'done', reason = '', sessions_moved = $2, bytes_copied = $3,
			bytes_total = $4, pause_ms = $5, updated_at = now(), finished_at = now() WHERE id = $1`,
			[]any{id, r.SessionsMoved, int64(r.BytesCopied), int64(r.BytesTotal), r.PauseMs}},
	}
	for _, st := range steps {
		if _, err := tx.Exec(ctx, st.sql, st.args...); err != nil {
			return fmt.Errorf("move %s: %s: %w", id, st.what, err)
		}
	}
	return Audit(ctx, tx, uuid.Nil, "moved", "instance", instance.String(), map[string]any{"move": id, "gpu_server": target,
		"sessions": r.SessionsMoved})
}

// failMove gives the target's reservation back and records why.
func failMove(ctx context.Context, tx pgx.Tx, id, instance uuid.UUID, r api.MoveReport) error {
	reason := r.Reason
	if reason == "" {
		reason = "the source GPU server reported a failure without a reason"
	}
	if _, err := tx.Exec(ctx, `UPDATE gpus SET reserved_bytes = gpus.reserved_bytes - m.bytes FROM gpu_server_move_gpus m
		WHERE m.move_id = $1 AND gpus.id = m.gpu_id`, id); err != nil {
		return fmt.Errorf("move %s: give the target's GPUs back: %w", id, err)
	}
	if _, err := tx.Exec(ctx, `UPDATE gpu_server_moves SET state = 'failed', reason = $2, sessions_moved = $3,
		updated_at = now(), finished_at = now() WHERE id = $1`, id, reason, r.SessionsMoved); err != nil {
		return fmt.Errorf("move %s: %w", id, err)
	}
	return Audit(ctx, tx, uuid.Nil, "move-failed", "instance", instance.String(), map[string]any{"move": id, "reason": reason})
}
