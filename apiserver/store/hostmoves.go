package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"gpucloud/apiserver/placement"
)

// A VM host's drain that moves work (issue 18, item 4; docs/hostd.md): DrainHostMove plans, in one
// transaction, a move for each live instance on a host: a target host with room under the placement
// rules, reserved at once, or the reason there is none. Both hostds learn their part from their
// desired instances (api.DesiredInstance.Move): the source stops the VM and offers its disks on its
// transfer endpoint, then says ready; the target pulls them, defines and starts the VM, and says done,
// which gives the source's room back and places the instance on the target. The instance's state
// does not change on the way, so billing's allocations run on without a gap or a second interval.

// Move modes.
const (
	MoveRestart = "restart"
	MoveLive    = "live"
)

// HostMove is one planned move off a host as operators see it.
type HostMove struct {
	ID          uuid.UUID  `json:"id"`
	InstanceID  uuid.UUID  `json:"instance_id"`
	Instance    string     `json:"instance_name"`
	TenantID    uuid.UUID  `json:"tenant_id"`
	SourceID    uuid.UUID  `json:"source_id"`
	TargetID    *uuid.UUID `json:"target_id,omitempty"`
	Mode        string     `json:"mode"`
	State       string     `json:"state" doc:"unplaced, pending (the source stops the VM), copying (the target pulls its disks), done or failed"`
	Reason      string     `json:"reason,omitempty"`
	Note        string     `json:"note,omitempty"`
	BytesCopied int64      `json:"bytes_copied"`
	BytesTotal  int64      `json:"bytes_total"`
	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
	FinishedAt  *time.Time `json:"finished_at,omitempty"`
}

// HostDrainStatus is a host's drain: its moves (each instance's newest), and the instances left.
type HostDrainStatus struct {
	HostID    uuid.UUID      `json:"host_id"`
	Draining  bool           `json:"draining"`
	Remaining int            `json:"remaining"` // live instances still placed here
	Counts    map[string]int `json:"counts"`    // moves by state
	Moves     []HostMove     `json:"moves"`
}

// Finished says whether no move is open.
func (d HostDrainStatus) Finished() bool { return d.Counts["pending"]+d.Counts["copying"] == 0 }

// liveOnHost selects the live instances placed on $1.
const liveOnHost = `i.host_id = $1 AND i.state NOT IN ('deleting', 'deleted') AND i.released_at IS NULL`

// openHostMove is the condition on a host move row (alias m) that it is open.
const openHostMove = `m.state IN ('pending', 'copying')`

// DrainHostMove cordons and drains a host and plans a move for each of its live instances that
// has no open move (one whose last move failed or found no room is planned again), all in one
// transaction. mode is restart or live; a live move the hosts cannot make is planned as a restart
// when fallback is set, else recorded unplaced with the reason. It returns the drain's status.
func (s *Store) DrainHostMove(ctx context.Context, host uuid.UUID, mode string, fallback bool) (HostDrainStatus, error) {
	err := s.InTx(ctx, func(tx pgx.Tx) error {
		var hypervisor, name, endpoint string
		err := tx.QueryRow(ctx, `UPDATE hosts SET cordoned = true, draining = true WHERE id = $1 AND deleted_at IS NULL
			RETURNING hypervisor, name, transfer_endpoint`, host).Scan(&hypervisor, &name, &endpoint)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("drain host: %w", err)
		}
		rows, err := tx.Query(ctx, `SELECT i.id, i.state, i.vcpus, i.memory_mib, i.disk_gib FROM instances i
			WHERE `+liveOnHost+` AND NOT EXISTS (SELECT 1 FROM host_moves m WHERE m.instance_id = i.id AND `+openHostMove+`)
			ORDER BY i.id FOR UPDATE OF i`, host)
		if err != nil {
			return fmt.Errorf("drain host: instances to move: %w", err)
		}
		type candidate struct {
			id    uuid.UUID
			state string
			req   placement.Request
		}
		var todo []candidate
		for rows.Next() {
			var c candidate
			if err := rows.Scan(&c.id, &c.state, &c.req.VCPUs, &c.req.MemoryMiB, &c.req.DiskGiB); err != nil {
				rows.Close()
				return fmt.Errorf("drain host: instances to move: %w", err)
			}
			todo = append(todo, c)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("drain host: instances to move: %w", err)
		}
		plan := hostMovePlan{source: host, mode: mode}
		if mode == MoveLive {
			if why := liveRefusal(name, hypervisor); why != "" {
				if !fallback {
					plan.refusal = why
				} else {
					plan.mode, plan.note = MoveRestart, why+"; restarted on the target instead (fallback asked)"
				}
			}
		}
		if plan.refusal == "" && plan.mode == MoveRestart && endpoint == "" {
			plan.refusal = fmt.Sprintf("host %s offers no transfer endpoint (hostd --transfer-listen): its VMs' disks cannot be copied", name)
		}
		planned := 0
		for _, c := range todo {
			if err := plan.move(ctx, tx, c.id, c.state, c.req); err != nil {
				return err
			}
			planned++
		}
		return Audit(ctx, tx, uuid.Nil, "drain-move", "host", host.String(), map[string]any{"planned": planned, "mode": mode,
			"fallback": fallback})
	})
	if err != nil {
		return HostDrainStatus{}, err
	}
	return s.HostDrainStatus(ctx, host)
}

// liveRefusal says why a VM on this host cannot be live-migrated, or "" when it can. hostd moves
// VMs by restarting them on the target; libvirt's peer-to-peer live migration (with the disks
// copied over NBD) is not built into hostd, and the test driver cannot migrate at all.
func liveRefusal(name, hypervisor string) string {
	if strings.HasPrefix(hypervisor, "test:") {
		return fmt.Sprintf("live migration not possible: host %s runs libvirt's test driver (%s), which cannot migrate a domain", name, hypervisor)
	}
	return fmt.Sprintf("live migration not possible: hostd on host %s (%s) does not do libvirt live migration yet", name, hypervisor)
}

// hostMovePlan is one drain's way of planning its moves.
type hostMovePlan struct {
	source  uuid.UUID
	mode    string
	note    string
	refusal string // set: every move is recorded unplaced with this reason
}

// move reserves room for instance on another host (the source is draining, so placement does
// not pick it) and records the move, or records it unplaced with the reason.
func (p hostMovePlan) move(ctx context.Context, tx pgx.Tx, instance uuid.UUID, state string, req placement.Request) error {
	id := NewID()
	unplaced := func(reason string) error {
		if _, err := tx.Exec(ctx, `INSERT INTO host_moves (id, instance_id, source_id, mode, state, reason, finished_at)
			VALUES ($1, $2, $3, $4, 'unplaced', $5, now())`, id, instance, p.source, p.mode, reason); err != nil {
			return fmt.Errorf("drain host: record unplaced move of %s: %w", instance, err)
		}
		return nil
	}
	if p.refusal != "" {
		return unplaced(p.refusal)
	}
	if state != StateRunning && state != StateStopped {
		return unplaced(fmt.Sprintf("the instance is %s: only running or stopped instances move; drain again once it settles", state))
	}
	target, err := placement.PlaceHost(ctx, tx, req)
	if placement.IsNoCapacity(err) {
		return unplaced(err.Error())
	}
	if err != nil {
		return fmt.Errorf("drain host: place %s: %w", instance, err)
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return fmt.Errorf("drain host: move secret: %w", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO host_moves (id, instance_id, source_id, target_id, mode, state, note, vcpus, memory_mib,
		disk_gib, secret) VALUES ($1, $2, $3, $4, $5, 'pending', $6, $7, $8, $9, $10)`,
		id, instance, p.source, target, p.mode, p.note, req.VCPUs, req.MemoryMiB, req.DiskGiB, hex.EncodeToString(secret)); err != nil {
		return fmt.Errorf("drain host: record move of %s: %w", instance, err)
	}
	return nil
}

// HostDrainStatus reads a host's drain: the instances left and the moves from one snapshot, so a
// move read as done has its instance off the host (finishHostMove commits both at once).
func (s *Store) HostDrainStatus(ctx context.Context, host uuid.UUID) (HostDrainStatus, error) {
	d := HostDrainStatus{HostID: host, Counts: map[string]int{}, Moves: []HostMove{}}
	err := s.InSnapshot(ctx, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `SELECT draining, (SELECT count(*) FROM instances i WHERE `+liveOnHost+`)
			FROM hosts WHERE id = $1 AND deleted_at IS NULL`, host).Scan(&d.Draining, &d.Remaining)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("host drain status: %w", err)
		}
		rows, err := tx.Query(ctx, `SELECT m.id, m.instance_id, i.name, i.tenant_id, m.source_id, m.target_id, m.mode, m.state,
				m.reason, m.note, m.bytes_copied, m.bytes_total, m.created_at, m.updated_at, m.finished_at FROM (
				SELECT DISTINCT ON (instance_id) * FROM host_moves WHERE source_id = $1
				ORDER BY instance_id, created_at DESC, id DESC) m
			JOIN instances i ON i.id = m.instance_id ORDER BY m.created_at DESC, m.id LIMIT $2`, host, maxMovesShown)
		if err != nil {
			return fmt.Errorf("host drain status: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var m HostMove
			if err := rows.Scan(&m.ID, &m.InstanceID, &m.Instance, &m.TenantID, &m.SourceID, &m.TargetID, &m.Mode, &m.State,
				&m.Reason, &m.Note, &m.BytesCopied, &m.BytesTotal, &m.CreatedAt, &m.UpdatedAt, &m.FinishedAt); err != nil {
				return fmt.Errorf("host drain status: %w", err)
			}
			d.Counts[m.State]++
			d.Moves = append(d.Moves, m)
		}
		return rows.Err()
	})
	return d, err
}
