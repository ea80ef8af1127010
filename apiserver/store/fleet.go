package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"gpucloud/api"
)

// Host is a VM host as operators see it.
type Host struct {
	ID              uuid.UUID  `json:"id"`
	Name            string     `json:"name"`
	Hostname        string     `json:"hostname"`
	Hypervisor      string     `json:"hypervisor"`
	Version         string     `json:"version"`
	VCPUs           int        `json:"vcpus"`
	MemoryMiB       int        `json:"memory_mib"`
	DiskGiB         int        `json:"disk_gib"`
	InfiniBandVFs   int        `json:"infiniband_vfs"`
	UsedVCPUs       int        `json:"used_vcpus"`
	UsedMemoryMiB   int        `json:"used_memory_mib"`
	UsedDiskGiB     int        `json:"used_disk_gib"`
	Status          string     `json:"status"`
	Cordoned        bool       `json:"cordoned"`
	Draining        bool       `json:"draining"`
	LastHeartbeatAt *time.Time `json:"last_heartbeat_at,omitempty"`
	CreatedAt       time.Time  `json:"created_at"`
}

// GPU is one GPU of a GPU server.
type GPU struct {
	ID            uuid.UUID  `json:"id"`
	UUID          string     `json:"uuid"`
	Index         int        `json:"index"`
	Name          string     `json:"name"`
	GPUModelID    *uuid.UUID `json:"gpu_model_id,omitempty"`
	MemoryBytes   int64      `json:"memory_bytes"`
	ReservedBytes int64      `json:"reserved_bytes"`
	Healthy       bool       `json:"healthy"`
}

// GPUServer is a GPU server as operators see it.
type GPUServer struct {
	ID              uuid.UUID  `json:"id"`
	Name            string     `json:"name"`
	Hostname        string     `json:"hostname"`
	Endpoint        string     `json:"endpoint"`
	Backend         string     `json:"backend"`
	Version         string     `json:"version"`
	ActiveSessions  int        `json:"active_sessions"`
	Status          string     `json:"status"`
	Cordoned        bool       `json:"cordoned"`
	Draining        bool       `json:"draining"`
	LastHeartbeatAt *time.Time `json:"last_heartbeat_at,omitempty"`
	CreatedAt       time.Time  `json:"created_at"`
	GPUs            []GPU      `json:"gpus"`
}

// Kind names the two daemon tables.
type Kind string

const (
	KindHost      Kind = "hosts"
	KindGPUServer Kind = "gpu_servers"
)

func (k Kind) resource() string {
	if k == KindHost {
		return "host"
	}
	return "gpu-server"
}

// CreateDaemon registers a host or GPU server by name and returns its id and credential (shown once).
func (s *Store) CreateDaemon(ctx context.Context, kind Kind, name string) (uuid.UUID, string, error) {
	prefix := PrefixHost
	if kind == KindGPUServer {
		prefix = PrefixGPUServer
	}
	secret, hash := NewSecret(prefix)
	id := NewID()
	err := s.InTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO `+string(kind)+` (id, name, credential_hash) VALUES ($1, $2, $3)`, id, name, hash); err != nil {
			return fmt.Errorf("create %s: %w", kind.resource(), err)
		}
		return Audit(ctx, tx, uuid.Nil, "create", kind.resource(), id.String(), map[string]string{"name": name})
	})
	return id, secret, err
}

// SetDaemonFlag applies an operator action: cordon, uncordon, drain or delete.
// Deleting refuses while instances still use the daemon.
func (s *Store) SetDaemonFlag(ctx context.Context, kind Kind, id uuid.UUID, action string) error {
	var set string
	switch action {
	case "cordon":
		set = "cordoned = true"
	case "uncordon":
		set = "cordoned = false, draining = false"
	case "drain":
		set = "cordoned = true, draining = true"
	case "delete":
		set = "deleted_at = now(), cordoned = true"
	default:
		return fmt.Errorf("unknown action %q", action)
	}
	return s.InTx(ctx, func(tx pgx.Tx) error {
		if action == "delete" {
			col := "host_id"
			if kind == KindGPUServer {
				col = "gpu_server_id"
			}
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM instances WHERE `+col+` = $1 AND state <> 'deleted' AND released_at IS NULL`, id).Scan(&n); err != nil {
				return fmt.Errorf("count instances: %w", err)
			}
			if n > 0 {
				return &InUseError{Count: n}
			}
		}
		tag, err := tx.Exec(ctx, `UPDATE `+string(kind)+` SET `+set+` WHERE id = $1 AND deleted_at IS NULL`, id)
		if err != nil {
			return fmt.Errorf("%s %s: %w", action, kind.resource(), err)
		}
		if tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		return Audit(ctx, tx, uuid.Nil, action, kind.resource(), id.String(), nil)
	})
}

// InUseError refuses to delete a daemon that instances still use.
type InUseError struct{ Count int }

func (e *InUseError) Error() string { return fmt.Sprintf("%d instance(s) still placed here", e.Count) }

const hostCols = `id, name, hostname, hypervisor, version, vcpus, memory_mib, disk_gib, infiniband_vfs,
	used_vcpus, used_memory_mib, used_disk_gib, status, cordoned, draining, last_heartbeat_at, created_at`

func scanHost(row pgx.Row) (Host, error) {
	var h Host
	err := row.Scan(&h.ID, &h.Name, &h.Hostname, &h.Hypervisor, &h.Version, &h.VCPUs, &h.MemoryMiB, &h.DiskGiB,
		&h.InfiniBandVFs, &h.UsedVCPUs, &h.UsedMemoryMiB, &h.UsedDiskGiB, &h.Status, &h.Cordoned, &h.Draining,
		&h.LastHeartbeatAt, &h.CreatedAt)
	return h, err
}

// GetHost returns a live host.
func (s *Store) GetHost(ctx context.Context, id uuid.UUID) (Host, error) {
	h, err := scanHost(s.Pool.QueryRow(ctx, `SELECT `+hostCols+` FROM hosts WHERE id = $1 AND deleted_at IS NULL`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return h, ErrNotFound
	}
	return h, err
}

// ListHosts pages live hosts.
func (s *Store) ListHosts(ctx context.Context, after uuid.UUID, limit int) ([]Host, error) {
	rows, err := s.Pool.Query(ctx, `SELECT `+hostCols+` FROM hosts WHERE deleted_at IS NULL AND id > $1 ORDER BY id LIMIT $2`, after, limit)
	if err != nil {
		return nil, fmt.Errorf("list hosts: %w", err)
	}
	defer rows.Close()
	var out []Host
	for rows.Next() {
		h, err := scanHost(rows)
		if err != nil {
			return nil, fmt.Errorf("list hosts: %w", err)
		}
		out = append(out, h)
	}
	return out, rows.Err()
}

const gpuServerCols = `id, name, hostname, endpoint, backend, version, active_sessions, status, cordoned, draining,
	last_heartbeat_at, created_at`

// GetGPUServer returns a live GPU server with its GPUs.
func (s *Store) GetGPUServer(ctx context.Context, id uuid.UUID) (GPUServer, error) {
	list, err := s.listGPUServers(ctx, `id = $1`, id)
	if err != nil {
		return GPUServer{}, err
	}
	if len(list) == 0 {
		return GPUServer{}, ErrNotFound
	}
	return list[0], nil
}

// ListGPUServers pages live GPU servers.
func (s *Store) ListGPUServers(ctx context.Context, after uuid.UUID, limit int) ([]GPUServer, error) {
	return s.listGPUServers(ctx, `id > $1 ORDER BY id LIMIT $2`, after, limit)
}

func (s *Store) listGPUServers(ctx context.Context, where string, args ...any) ([]GPUServer, error) {
	rows, err := s.Pool.Query(ctx, `SELECT `+gpuServerCols+` FROM gpu_servers WHERE deleted_at IS NULL AND `+where, args...)
	if err != nil {
		return nil, fmt.Errorf("list gpu servers: %w", err)
	}
	var out []GPUServer
	for rows.Next() {
		var g GPUServer
		if err := rows.Scan(&g.ID, &g.Name, &g.Hostname, &g.Endpoint, &g.Backend, &g.Version, &g.ActiveSessions,
			&g.Status, &g.Cordoned, &g.Draining, &g.LastHeartbeatAt, &g.CreatedAt); err != nil {
			rows.Close()
			return nil, fmt.Errorf("list gpu servers: %w", err)
		}
		g.GPUs = []GPU{}
		out = append(out, g)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list gpu servers: %w", err)
	}
	for i := range out {
		rows, err := s.Pool.Query(ctx, `SELECT id, uuid, idx, name, gpu_model_id, memory_bytes, reserved_bytes, healthy
			FROM gpus WHERE gpu_server_id = $1 ORDER BY idx`, out[i].ID)
		if err != nil {
			return nil, fmt.Errorf("list gpus: %w", err)
		}
		for rows.Next() {
			var g GPU
			if err := rows.Scan(&g.ID, &g.UUID, &g.Index, &g.Name, &g.GPUModelID, &g.MemoryBytes, &g.ReservedBytes, &g.Healthy); err != nil {
				rows.Close()
				return nil, fmt.Errorf("list gpus: %w", err)
			}
			out[i].GPUs = append(out[i].GPUs, g)
		}
		rows.Close()
	}
	return out, nil
}

// HostHeartbeat records a host's report; the first one makes it ready with its capacity.
// Capacity below what is already reserved is recorded as reported: placement simply finds no room.
func (s *Store) HostHeartbeat(ctx context.Context, id uuid.UUID, r api.HostReport) (cordoned bool, err error) {
	err = s.InTx(ctx, func(tx pgx.Tx) error {
		var prev string
		// FOR NO KEY UPDATE, not FOR UPDATE: it serialises heartbeats but leaves FOR KEY SHARE
		// (the foreign key check of a create placing onto this host) free.
		if err := tx.QueryRow(ctx, `SELECT status FROM hosts WHERE id = $1 AND deleted_at IS NULL FOR NO KEY UPDATE`, id).Scan(&prev); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return ErrNotFound
			}
			return fmt.Errorf("host heartbeat: %w", err)
		}
		if err := tx.QueryRow(ctx, `UPDATE hosts SET hostname = $2, hypervisor = $3, version = $4, vcpus = $5, memory_mib = $6,
			disk_gib = $7, infiniband_vfs = $8, console_url = $9, transfer_endpoint = $10, status = 'ready', last_heartbeat_at = now() WHERE id = $1 RETURNING cordoned`,
			id, r.Hostname, r.Hypervisor, r.Version, r.Capacity.VCPUs, r.Capacity.MemoryMiB, r.Capacity.DiskGiB,
			r.Capacity.InfiniBandVFs, r.ConsoleURL, r.TransferEndpoint).Scan(&cordoned); err != nil {
			return fmt.Errorf("host heartbeat: %w", err)
		}
		if prev != "ready" {
			return Audit(ctx, tx, uuid.Nil, "ready", "host", id.String(), r)
		}
		return nil
	})
	return cordoned, err
}

// GPUServerHeartbeat records a GPU server's report: its GPUs are upserted by UUID and matched to
// catalog models by NVML product name. GPUs no longer reported are marked unhealthy, not deleted,
// because reservations may still point at them.
func (s *Store) GPUServerHeartbeat(ctx context.Context, id uuid.UUID, r api.GPUServerReport) (cordoned bool, err error) {
	models, err := s.ListGPUModels(ctx)
	if err != nil {
		return false, err
	}
	err = s.InTx(ctx, func(tx pgx.Tx) error {
		var prev string
		// FOR NO KEY UPDATE, not FOR UPDATE: a create holding one of this server's GPU rows
		// checks its instance's foreign key here (FOR KEY SHARE) while this heartbeat waits for
		// that GPU row below; FOR UPDATE would make that a deadlock.
		if err := tx.QueryRow(ctx, `SELECT status FROM gpu_servers WHERE id = $1 AND deleted_at IS NULL FOR NO KEY UPDATE`, id).Scan(&prev); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return ErrNotFound
			}
			return fmt.Errorf("gpu server heartbeat: %w", err)
		}
		if err := tx.QueryRow(ctx, `UPDATE gpu_servers SET hostname = $2, endpoint = $3, backend = $4, version = $5,
			active_sessions = $6, status = 'ready', last_heartbeat_at = now() WHERE id = $1 RETURNING cordoned`,
			id, r.Hostname, r.Endpoint, r.Backend, r.Version, len(r.ActiveSessions)).Scan(&cordoned); err != nil {
			return fmt.Errorf("gpu server heartbeat: %w", err)
		}
		seen := make([]string, 0, len(r.GPUs))
		for _, g := range r.GPUs {
			var model *uuid.UUID
			for _, m := range models {
				if strings.Contains(g.Name, m.NVMLMatch) {
					model = &m.ID
					break
				}
			}
			// A GPU's UUID belongs to one server; a report claiming another server's GPU is refused.
			tag, err := tx.Exec(ctx, `INSERT INTO gpus (id, gpu_server_id, uuid, idx, name, gpu_model_id, memory_bytes, pci_bus_id, healthy)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
				ON CONFLICT (uuid) DO UPDATE SET idx = excluded.idx, name = excluded.name, gpu_model_id = excluded.gpu_model_id,
				  memory_bytes = greatest(excluded.memory_bytes, gpus.reserved_bytes), pci_bus_id = excluded.pci_bus_id,
				  healthy = excluded.healthy
				WHERE gpus.gpu_server_id = excluded.gpu_server_id`,
				NewID(), id, g.UUID, g.Index, g.Name, model, int64(g.MemoryBytes), g.PCIBusID, g.Healthy)
			if err != nil {
				return fmt.Errorf("gpu %s: %w", g.UUID, err)
			}
			if tag.RowsAffected() == 0 {
				return &ConflictError{Msg: fmt.Sprintf("GPU %s belongs to another GPU server", g.UUID)}
			}
			seen = append(seen, g.UUID)
		}
		if _, err := tx.Exec(ctx, `UPDATE gpus SET healthy = false WHERE gpu_server_id = $1 AND NOT (uuid = ANY($2))`, id, seen); err != nil {
			return fmt.Errorf("mark missing gpus: %w", err)
		}
		if prev != "ready" {
			return Audit(ctx, tx, uuid.Nil, "ready", "gpu-server", id.String(), map[string]any{"gpus": len(r.GPUs), "endpoint": r.Endpoint})
		}
		return nil
	})
	return cordoned, err
}

// ConflictError is a request that contradicts the current state.
type ConflictError struct{ Msg string }

func (e *ConflictError) Error() string { return e.Msg }

// MarkUnreachable flags daemons silent for longer than timeout and returns how many it flagged.
func (s *Store) MarkUnreachable(ctx context.Context, timeout time.Duration) (int64, error) {
	var total int64
	for _, kind := range []Kind{KindHost, KindGPUServer} {
		// One transaction: a reader never sees the status without the audit record that dates it
		// (the instance conditions' since).
		var ids []uuid.UUID
		err := s.InTx(ctx, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `UPDATE `+string(kind)+` SET status = 'unreachable'
				WHERE status = 'ready' AND deleted_at IS NULL AND last_heartbeat_at < now() - make_interval(secs => $1) RETURNING id`, timeout.Seconds())
			if err != nil {
				return fmt.Errorf("mark unreachable %s: %w", kind, err)
			}
			if ids, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID]); err != nil {
				return fmt.Errorf("mark unreachable %s: %w", kind, err)
			}
			for _, id := range ids {
				if err := Audit(ctx, tx, uuid.Nil, "unreachable", kind.resource(), id.String(), map[string]string{"silent_for": timeout.String()}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return total, err
		}
		total += int64(len(ids))
	}
	return total, nil
}
