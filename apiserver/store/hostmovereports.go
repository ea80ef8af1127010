package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"gpucloud/api"
)

// The two hostds' side of a host drain's moves (hostmoves.go plans them): what each host is told
// in its desired instances, and what its reports do.

// MoveStall is how long a move may go without word from the host whose turn it is (the source
// while pending, the target while copying: it reports progress about every second) before it
// fails, so a dead target does not keep a stopped VM from starting again on its source.
const MoveStall = 15 * time.Minute

// HostMoveOrders are the open moves host takes part in, by instance id, as its hostd needs them:
// as the source (pending or copying) or the target (copying: the source has offered the disks).
// Moves whose instance is being deleted, or that stalled (MoveStall), are failed first (the
// target's room given back).
func (s *Store) HostMoveOrders(ctx context.Context, host uuid.UUID) (map[uuid.UUID]api.HostMove, error) {
	rows, err := s.Pool.Query(ctx, `SELECT m.id, CASE
			WHEN i.desired_state = 'deleted' OR i.state IN ('deleting', 'deleted') OR i.released_at IS NOT NULL
			THEN 'the instance was deleted while it moved'
			WHEN m.state = 'pending' THEN 'no word from the source host for ' || $2::text
			ELSE 'no word from the target host for ' || $2::text END
		FROM host_moves m JOIN instances i ON i.id = m.instance_id
		WHERE (m.source_id = $1 OR m.target_id = $1) AND `+openHostMove+`
		  AND (i.desired_state = 'deleted' OR i.state IN ('deleting', 'deleted') OR i.released_at IS NOT NULL
		       OR m.updated_at < now() - make_interval(secs => $3))`, host, MoveStall.String(), MoveStall.Seconds())
	if err != nil {
		return nil, fmt.Errorf("host moves: %w", err)
	}
	type ended struct {
		id     uuid.UUID
		reason string
	}
	gone, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ended, error) {
		var e ended
		err := r.Scan(&e.id, &e.reason)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("host moves: %w", err)
	}
	for _, e := range gone {
		if err := s.InTx(ctx, func(tx pgx.Tx) error { return failHostMove(ctx, tx, e.id, e.reason) }); err != nil {
			return nil, err
		}
	}
	rows, err = s.Pool.Query(ctx, `SELECT m.id, m.instance_id, m.source_id = $1, m.state, m.mode, m.secret, src.transfer_endpoint,
			i.private_address
		FROM host_moves m JOIN hosts src ON src.id = m.source_id JOIN instances i ON i.id = m.instance_id
		WHERE (m.source_id = $1 OR (m.target_id = $1 AND m.state = 'copying')) AND `+openHostMove, host)
	if err != nil {
		return nil, fmt.Errorf("host moves: %w", err)
	}
	defer rows.Close()
	out := map[uuid.UUID]api.HostMove{}
	for rows.Next() {
		var id, instance uuid.UUID
		var isSource bool
		var m api.HostMove
		if err := rows.Scan(&id, &instance, &isSource, &m.Phase, &m.Mode, &m.Secret, &m.Source, &m.PrivateAddress); err != nil {
			return nil, fmt.Errorf("host moves: %w", err)
		}
		m.ID, m.Role = id.String(), api.MoveIn
		if isSource {
			m.Role, m.Source, m.PrivateAddress = api.MoveOut, "", ""
		}
		out[instance] = m
	}
	return out, rows.Err()
}

// ErrMoveReport is a report a move cannot take now (the wrong host's turn, or an unknown state).
type ErrMoveReport struct{ Msg string }

func (e *ErrMoveReport) Error() string { return e.Msg }

// ReportHostMove applies host's report on one of its moves and returns the move's state after it.
// The source may say ready (while pending) or failed; the target copying, done or failed (while
// copying). A report on a finished move changes nothing (retries are idempotent); one on a move
// host is not part of is ErrNotYourMove and changes nothing.
func (s *Store) ReportHostMove(ctx context.Context, host, id uuid.UUID, r api.HostMoveReport) (string, error) {
	var state string
	err := s.InTx(ctx, func(tx pgx.Tx) error {
		var source uuid.UUID
		var instance uuid.UUID
		var target *uuid.UUID
		err := tx.QueryRow(ctx, `SELECT state, instance_id, source_id, target_id FROM host_moves
			WHERE id = $1 AND (source_id = $2 OR target_id = $2) FOR UPDATE`, id, host).Scan(&state, &instance, &source, &target)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("host move %s: %w", id, ErrNotYourMove)
		}
		if err != nil {
			return fmt.Errorf("host move %s: %w", id, err)
		}
		if state != "pending" && state != "copying" {
			return nil // finished: a retried report
		}
		role := "target"
		if source == host {
			role = "source"
		}
		switch {
		case r.State == api.HostMoveFailed:
			reason := r.Reason
			if reason == "" {
				reason = "reported a failure without a reason"
			}
			state = "failed"
			return failHostMove(ctx, tx, id, "the "+role+" host: "+reason)
		case role == "source" && r.State == api.HostMoveReady && state == "pending":
			state = "copying"
			_, err := tx.Exec(ctx, `UPDATE host_moves SET state = 'copying', bytes_total = $2, updated_at = now() WHERE id = $1`,
				id, r.BytesTotal)
			return wrap(err, "host move %s: ready", id)
		case role == "target" && r.State == api.HostMoveCopying && state == "copying":
			_, err := tx.Exec(ctx, `UPDATE host_moves SET bytes_copied = $2, bytes_total = greatest(bytes_total, $3), updated_at = now()
				WHERE id = $1`, id, r.BytesCopied, r.BytesTotal)
			return wrap(err, "host move %s: progress", id)
		case role == "target" && r.State == api.HostMoveDone && state == "copying":
			state = "done"
			return finishHostMove(ctx, tx, id, instance, source, *target, r)
		}
		return &ErrMoveReport{Msg: fmt.Sprintf("host move %s is %s: the %s host cannot report %s now", id, state, role, r.State)}
	})
	return state, err
}

func wrap(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf(format+": %w", append(args, err)...)
}

// finishHostMove gives the source's room back and places the instance (and its volumes) on the
// target, with what the target observed. The instance's state is left as it is: the move is not
// a stop and a start, for the tenant or for billing.
func finishHostMove(ctx context.Context, tx pgx.Tx, id, instance, source, target uuid.UUID, r api.HostMoveReport) error {
	obs := api.InstanceObserved{}
	if r.Observed != nil {
		obs = *r.Observed
	}
	fw := obs.Forwards
	if fw == nil {
		fw = []api.PortForward{}
	}
	steps := []struct {
		what string
		sql  string
		args []any
	}{
		{"give the source's room back", `UPDATE hosts SET used_vcpus = used_vcpus - i.vcpus, used_memory_mib = used_memory_mib - i.memory_mib,
			used_disk_gib = used_disk_gib - i.disk_gib FROM instances i WHERE i.id = $1 AND hosts.id = $2`, []any{instance, source}},
		{"place on the target", `UPDATE instances SET host_id = $2, port_forwards = $3, public_host = $4, vf_pci_address = $5,
			private_address = CASE WHEN $6 = '' THEN private_address ELSE $6 END, updated_at = now() WHERE id = $1`,
			[]any{instance, target, fw, obs.PublicHost, obs.VFPCIAddress, obs.PrivateAddress}},
		{"move the volumes", `UPDATE volumes SET host_id = $2, updated_at = now() WHERE instance_id = $1 AND deleted_at IS NULL`,
			[]any{instance, target}},
		{"record", `UPDATE host_moves SET state = 'done', reason = '', bytes_copied = greatest(bytes_copied, $2),
			updated_at = now(), finished_at = now() WHERE id = $1`, []any{id, r.BytesCopied}},
	}
	for _, st := range steps {
		if _, err := tx.Exec(ctx, st.sql, st.args...); err != nil {
			return fmt.Errorf("host move %s: %s: %w", id, st.what, err)
		}
	}
	var tenant uuid.UUID
	if err := tx.QueryRow(ctx, `SELECT tenant_id FROM instances WHERE id = $1`, instance).Scan(&tenant); err != nil {
		return fmt.Errorf("host move %s: %w", id, err)
	}
	return Audit(ctx, tx, tenant, "moved", "instance", instance.String(), map[string]any{"move": id, "host": target})
}

// failHostMove gives the target's room back and records why; the instance stays on the source,
// whose hostd starts it again if it is wanted running.
func failHostMove(ctx context.Context, tx pgx.Tx, id uuid.UUID, reason string) error {
	var instance uuid.UUID
	err := tx.QueryRow(ctx, `UPDATE host_moves SET state = 'failed', reason = $2, updated_at = now(), finished_at = now()
		WHERE id = $1 AND state IN ('pending', 'copying') RETURNING instance_id`, id, reason).Scan(&instance)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // finished meanwhile
	}
	if err != nil {
		return fmt.Errorf("host move %s: %w", id, err)
	}
	if _, err := tx.Exec(ctx, `UPDATE hosts SET used_vcpus = used_vcpus - m.vcpus, used_memory_mib = used_memory_mib - m.memory_mib,
		used_disk_gib = used_disk_gib - m.disk_gib FROM host_moves m WHERE m.id = $1 AND hosts.id = m.target_id`, id); err != nil {
		return fmt.Errorf("host move %s: give the target's room back: %w", id, err)
	}
	return Audit(ctx, tx, uuid.Nil, "move-failed", "instance", instance.String(), map[string]any{"move": id, "reason": reason})
}

// movingIn selects the instances whose move to host $1 is copying (the target defines them).
const movingIn = `SELECT instance_id FROM host_moves WHERE target_id = $1 AND state = 'copying'`

// hasOpenHostMove says whether instance is moving between hosts.
func hasOpenHostMove(ctx context.Context, tx pgx.Tx, instance uuid.UUID) (bool, error) {
	var open bool
	err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM host_moves m WHERE m.instance_id = $1 AND `+openHostMove+`)`, instance).Scan(&open)
	if err != nil {
		return false, fmt.Errorf("open host move of %s: %w", instance, err)
	}
	return open, nil
}
