package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"gpucloud/apiserver/placement"
)

// Instance states.
const (
	StatePending      = "pending"
	StateProvisioning = "provisioning"
	StateRunning      = "running"
	StateStopping     = "stopping"
	StateStopped      = "stopped"
	StateDeleting     = "deleting"
	StateDeleted      = "deleted"
	StateFailed       = "failed"
)

// Instance is a tenant's VM.
type Instance struct {
	ID               uuid.UUID  `json:"id"`
	TenantID         uuid.UUID  `json:"tenant_id"`
	Name             string     `json:"name"`
	InstanceTypeID   uuid.UUID  `json:"instance_type_id"`
	Image            string     `json:"image"`
	SSHKey           string     `json:"ssh_key,omitempty"`
	State            string     `json:"state"`
	DesiredState     string     `json:"desired_state"`
	FailureReason    string     `json:"failure_reason,omitempty"`
	HostID           uuid.UUID  `json:"host_id"`
	GPUServerID      *uuid.UUID `json:"gpu_server_id,omitempty"`
	VCPUs            int        `json:"vcpus"`
	MemoryMiB        int        `json:"memory_mib"`
	DiskGiB          int        `json:"disk_gib"`
	Tier             string     `json:"tier"`
	GPUModel         string     `json:"gpu_model,omitempty"`
	GPUCount         int        `json:"gpu_count"`
	GPUMemoryBytes   int64      `json:"gpu_memory_bytes"`
	MemoryQuota      int64      `json:"-"`
	RebootGeneration int64      `json:"reboot_generation"`
	ObservedReboot   int64      `json:"-"`
	VFPCIAddress     string     `json:"vf_pci_address,omitempty"`
	CreatedAt        time.Time  `json:"created_at"`
	UpdatedAt        time.Time  `json:"updated_at"`
}

const instanceCols = `id, tenant_id, name, instance_type_id, image, ssh_key, state, desired_state, failure_reason,
	host_id, gpu_server_id, vcpus, memory_mib, disk_gib, tier, gpu_model, gpu_count, gpu_memory_bytes, memory_quota,
	reboot_generation, observed_reboot_generation, vf_pci_address, created_at, updated_at`

// scanInstance reads instanceCols, then any extra columns into extra.
func scanInstance(row pgx.Row, extra ...any) (Instance, error) {
	var i Instance
	dest := append([]any{&i.ID, &i.TenantID, &i.Name, &i.InstanceTypeID, &i.Image, &i.SSHKey, &i.State, &i.DesiredState,
		&i.FailureReason, &i.HostID, &i.GPUServerID, &i.VCPUs, &i.MemoryMiB, &i.DiskGiB, &i.Tier, &i.GPUModel,
		&i.GPUCount, &i.GPUMemoryBytes, &i.MemoryQuota, &i.RebootGeneration, &i.ObservedReboot, &i.VFPCIAddress,
		&i.CreatedAt, &i.UpdatedAt}, extra...)
	err := row.Scan(dest...)
	return i, err
}

// NewInstance is a create request, already validated for shape.
type NewInstance struct {
	Name           string
	InstanceTypeID uuid.UUID
	Image          string
	SSHKey         string
}

// QuotaError names the quota a create would exceed.
type QuotaError struct {
	Resource         string
	Limit, Used, Ask int64
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("%s quota exceeded: limit %d, in use %d, requested %d", e.Resource, e.Limit, e.Used, e.Ask)
}

// FieldError is a request naming something that does not exist or does not fit.
type FieldError struct{ Field, Reason string }

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// CreateInstance validates the type, places and reserves capacity, records the instance as
// pending with its first event and audit entry, and charges the tenant's quota: all in one
// transaction, so a failure at any step leaves nothing reserved.
//
// With idem, the Idempotency-Key record (the rendered answer) is written in the same
// transaction, so the instance and its replayable answer commit together; a concurrent request
// with the same key waits on the record's row and then gets ErrIdempotencyRace.
func (s *Store) CreateInstance(ctx context.Context, tenant uuid.UUID, actor string, in NewInstance, idem *Idempotency) (Instance, []byte, error) {
	var inst Instance
	var answer []byte
	err := s.InTx(ctx, func(tx pgx.Tx) error {
		sh, err := s.shape(ctx, tx, in.InstanceTypeID)
		if err != nil {
			return err
		}
		tier := sh.Tier
		req := placement.Request{VCPUs: sh.VCPUs, MemoryMiB: sh.MemoryMiB, DiskGiB: sh.DiskGiB, GPUModelID: sh.ModelID,
			GPUCount: sh.GPUCount, Dedicated: tier == "dedicated"}
		if !req.Dedicated && req.GPUCount > 0 {
			if req.SliceBytes, err = s.sharedSlice(ctx, tx); err != nil {
				return err
			}
		}
		res, err := placement.Place(ctx, tx, req)
		if err != nil {
			return err
		}
		var perGPU int64
		if len(res.GPUs) > 0 {
			perGPU = res.GPUs[0].Bytes
		}
		inst = Instance{
			ID: NewID(), TenantID: tenant, Name: in.Name, InstanceTypeID: in.InstanceTypeID, Image: in.Image,
			SSHKey: in.SSHKey, State: StatePending, DesiredState: "running", HostID: res.HostID,
			VCPUs: req.VCPUs, MemoryMiB: req.MemoryMiB, DiskGiB: req.DiskGiB, Tier: tier, GPUCount: req.GPUCount,
			GPUMemoryBytes: perGPU,
			// Set here rather than by the database so the answer can be rendered before commit.
			CreatedAt: time.Now().UTC().Truncate(time.Microsecond),
		}
		inst.UpdatedAt = inst.CreatedAt
		inst.GPUModel = sh.ModelName
		if !req.Dedicated {
			inst.MemoryQuota = perGPU
		}
		if res.GPUServerID != uuid.Nil {
			inst.GPUServerID = &res.GPUServerID
		}
		// The rows of the create go in one batch: one round trip instead of five.
		b := &pgx.Batch{}
		b.Queue(`INSERT INTO instances (id, tenant_id, name, instance_type_id, image, ssh_key, state,
			desired_state, host_id, gpu_server_id, vcpus, memory_mib, disk_gib, tier, gpu_model, gpu_count, gpu_memory_bytes,
			memory_quota, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $19)`,
			inst.ID, tenant, inst.Name, inst.InstanceTypeID, inst.Image, inst.SSHKey, inst.State, inst.DesiredState,
			inst.HostID, inst.GPUServerID, inst.VCPUs, inst.MemoryMiB, inst.DiskGiB, tier, inst.GPUModel, inst.GPUCount,
			perGPU, inst.MemoryQuota, inst.CreatedAt)
		for _, g := range res.GPUs {
			b.Queue(`INSERT INTO gpu_reservations (instance_id, gpu_id, bytes, dedicated) VALUES ($1, $2, $3, $4)`,
				inst.ID, g.ID, g.Bytes, req.Dedicated)
		}
		b.Queue(eventSQL, inst.ID, "", StatePending, "", actor)
		auditSQL, auditArgs, err := auditStmt(ctx, tenant, "create", "instance", inst.ID.String(),
			map[string]any{"name": inst.Name, "instance_type_id": inst.InstanceTypeID, "host_id": inst.HostID})
		if err != nil {
			return err
		}
		b.Queue(auditSQL, auditArgs...)
		// The tenant row is locked last (see package placement for the lock order): its lock is
		// the one every create of this tenant queues on, so it is held for the shortest time.
		gpus, gpuMem := int64(inst.GPUCount), int64(inst.GPUCount)*perGPU
		charged := false
		b.Queue(chargeSQL, tenant, gpus, gpuMem).Exec(func(tag pgconn.CommandTag) error {
			charged = tag.RowsAffected() == 1
			return nil
		})
		if idem != nil {
			if answer, err = idem.Render(inst); err != nil {
				return fmt.Errorf("render answer: %w", err)
			}
			b.Queue(`INSERT INTO idempotency_keys (principal, key, request_hash, status, content_type, body)
				VALUES ($1, $2, $3, $4, $5, $6)`, idem.Principal, idem.Key, idem.Hash, idem.Status, idem.ContentType, answer)
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.ConstraintName == "idempotency_keys_pkey" {
				return ErrIdempotencyRace
			}
			return fmt.Errorf("record instance: %w", err)
		}
		if !charged {
			return quotaError(ctx, tx, tenant, gpus, gpuMem)
		}
		return nil
	})
	return inst, answer, err
}

// Idempotency is an Idempotency-Key claim recorded with a create, and how to render the answer.
type Idempotency struct {
	Principal, Key string
	Hash           []byte
	Status         int
	ContentType    string
	Render         func(Instance) ([]byte, error)
}

// ErrIdempotencyRace: a concurrent request with the same key committed first.
var ErrIdempotencyRace = errors.New("idempotency key claimed by a concurrent request")

const chargeSQL = `UPDATE tenants SET used_instances = used_instances + 1, used_gpus = used_gpus + $2,
	used_gpu_memory_bytes = used_gpu_memory_bytes + $3
	WHERE id = $1 AND used_instances + 1 <= quota_instances AND used_gpus + $2 <= quota_gpus
	  AND used_gpu_memory_bytes + $3 <= quota_gpu_memory_bytes`

// quotaError says which quota a refused charge would have exceeded.
func quotaError(ctx context.Context, tx pgx.Tx, tenant uuid.UUID, gpus, gpuMem int64) error {
	var t Tenant
	if err := tx.QueryRow(ctx, `SELECT quota_instances, quota_gpus, quota_gpu_memory_bytes, used_instances, used_gpus,
		used_gpu_memory_bytes FROM tenants WHERE id = $1`, tenant).Scan(&t.QuotaInstances, &t.QuotaGPUs,
		&t.QuotaGPUMemoryBytes, &t.UsedInstances, &t.UsedGPUs, &t.UsedGPUMemoryBytes); err != nil {
		return fmt.Errorf("read quota: %w", err)
	}
	switch {
	case t.UsedInstances+1 > t.QuotaInstances:
		return &QuotaError{"instances", int64(t.QuotaInstances), int64(t.UsedInstances), 1}
	case int64(t.UsedGPUs)+gpus > int64(t.QuotaGPUs):
		return &QuotaError{"gpus", int64(t.QuotaGPUs), int64(t.UsedGPUs), gpus}
	default:
		return &QuotaError{"gpu_memory_bytes", t.QuotaGPUMemoryBytes, t.UsedGPUMemoryBytes, gpuMem}
	}
}

const eventSQL = `INSERT INTO instance_events (instance_id, from_state, to_state, reason, actor) VALUES ($1, $2, $3, $4, $5)`

func recordEvent(ctx context.Context, q Execer, id uuid.UUID, from, to, reason, actor string) error {
	if _, err := q.Exec(ctx, eventSQL, id, from, to, reason, actor); err != nil {
		return fmt.Errorf("record event %s->%s: %w", from, to, err)
	}
	return nil
}

// GetInstance returns an instance of tenant (zero: any tenant). Another tenant's instance is
// ErrNotFound, indistinguishable from one that does not exist.
func (s *Store) GetInstance(ctx context.Context, tenant, id uuid.UUID) (Instance, error) {
	i, err := scanInstance(s.Pool.QueryRow(ctx, `SELECT `+instanceCols+` FROM instances
		WHERE id = $1 AND ($2::uuid IS NULL OR tenant_id = $2)`, id, nullable(tenant)))
	if errors.Is(err, pgx.ErrNoRows) {
		return i, ErrNotFound
	}
	if err != nil {
		return i, fmt.Errorf("get instance: %w", err)
	}
	return i, nil
}

// ListInstances pages a tenant's instances (zero: all tenants) by id.
func (s *Store) ListInstances(ctx context.Context, tenant, after uuid.UUID, limit int) ([]Instance, error) {
	rows, err := s.Pool.Query(ctx, `SELECT `+instanceCols+` FROM instances
		WHERE ($1::uuid IS NULL OR tenant_id = $1) AND id > $2 ORDER BY id LIMIT $3`, nullable(tenant), after, limit)
	if err != nil {
		return nil, fmt.Errorf("list instances: %w", err)
	}
	defer rows.Close()
	var out []Instance
	for rows.Next() {
		i, err := scanInstance(rows)
		if err != nil {
			return nil, fmt.Errorf("list instances: %w", err)
		}
		out = append(out, i)
	}
	return out, rows.Err()
}

// Event is one recorded state transition.
type Event struct {
	From   string    `json:"from"`
	To     string    `json:"to"`
	Reason string    `json:"reason,omitempty"`
	Actor  string    `json:"actor"`
	At     time.Time `json:"at"`
}

// ListEvents returns an instance's transitions, oldest first.
func (s *Store) ListEvents(ctx context.Context, id uuid.UUID) ([]Event, error) {
	rows, err := s.Pool.Query(ctx, `SELECT from_state, to_state, reason, actor, at FROM instance_events WHERE instance_id = $1 ORDER BY id`, id)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var e Event
		if err := rows.Scan(&e.From, &e.To, &e.Reason, &e.Actor, &e.At); err != nil {
			return nil, fmt.Errorf("list events: %w", err)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}
