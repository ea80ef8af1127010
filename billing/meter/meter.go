// Package meter records what a tenant holds as allocation intervals (billing_allocations),
// written by the control plane in the same transaction as the instance's state transition: a
// transition that commits has its interval, one that rolls back has none, whichever daemon dies
// when. Rating (gpucloud/billing/rating) prices the intervals by the second.
//
// What is held, by state entered:
//
//	running:          GPUs (or slices), the VM and the root disk are held (opened if not yet)
//	stopped:          GPUs and VM released; the root disk stays (storage is billed while stopped)
//	deleted, failed:  everything released
//
// Other states (pending, provisioning, stopping, deleting) change nothing: a stopping instance
// still holds its GPU until its host reports it stopped.
package meter

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
)

// Execer is a transaction (the state transition's own).
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Kinds of allocation.
const (
	KindGPU     = "gpu"
	KindVM      = "vm"
	KindStorage = "storage"
)

// RootDisk is the resource id of an instance's root disk. Volumes use their own id.
func RootDisk(instance uuid.UUID) string { return instance.String() + "/root" }

// Transition records what instance holds after entering state to at at (truncated to the
// second: billing is per second). It is idempotent: replaying it opens nothing twice and
// closes nothing twice.
func Transition(ctx context.Context, tx Execer, instance uuid.UUID, to string, at time.Time) error {
	at = at.UTC().Truncate(time.Second)
	var open, closeKinds []string
	switch to {
	case "running":
		open = []string{KindGPU, KindVM, KindStorage}
	case "stopped":
		closeKinds = []string{KindGPU, KindVM}
	case "deleted", "failed":
		closeKinds = []string{KindGPU, KindVM, KindStorage}
	default:
		return nil
	}
	if len(closeKinds) > 0 {
		if _, err := tx.Exec(ctx, closeSQL, instance, closeKinds, at); err != nil {
			return fmt.Errorf("meter: release %v of %s: %w", closeKinds, instance, err)
		}
	}
	if len(open) > 0 {
		if _, err := tx.Exec(ctx, openSQL, instance, open, at); err != nil {
			return fmt.Errorf("meter: hold %v for %s: %w", open, instance, err)
		}
	}
	return nil
}

// closeSQL ends the instance's open intervals of the given kinds (root disk included; volumes
// attached to it are closed by the volume's own lifecycle, by resource id).
const closeSQL = `
UPDATE billing_allocations SET ended_at = greatest($3::timestamptz, started_at)
WHERE instance_id = $1 AND kind = ANY($2) AND ended_at IS NULL
    AND (kind <> 'storage' OR resource_id = $1::text || '/root')`

// openSQL opens an interval per kind unless one is open already (the partial unique index).
// Quantities come from the instance row: dedicated GPUs count GPUs, shared slices their memory
// quota in MiB (per GPU x GPUs), the root disk its size in MiB.
const openSQL = `
INSERT INTO billing_allocations (tenant_id, instance_id, kind, resource_id, tier, gpu_model, instance_type, quantity, started_at)
SELECT i.tenant_id, i.id, k.kind, k.resource_id, i.tier, i.gpu_model, coalesce(it.name, ''), k.quantity, $3
FROM instances i
LEFT JOIN instance_types it ON it.id = i.instance_type_id
CROSS JOIN LATERAL (VALUES
    ('gpu', i.id::text, CASE WHEN i.tier = 'shared'
        THEN i.gpu_count::bigint * (CASE WHEN i.memory_quota > 0 THEN i.memory_quota ELSE i.gpu_memory_bytes END / 1048576)
        ELSE i.gpu_count::bigint END),
    ('vm', i.id::text, 1::bigint),
    ('storage', i.id::text || '/root', i.disk_gib::bigint * 1024)
) AS k(kind, resource_id, quantity)
WHERE i.id = $1 AND k.kind = ANY($2) AND k.quantity > 0
ON CONFLICT (kind, resource_id) WHERE ended_at IS NULL DO NOTHING`

// Hold opens a storage interval for a resource that is not an instance's root disk (a volume:
// quantity in GiB), unless one is open. Volumes call it when created and Release when deleted.
func Hold(ctx context.Context, tx Execer, tenant, instance uuid.UUID, resource string, gib int64, at time.Time) error {
	if gib <= 0 {
		return fmt.Errorf("meter: storage %s: size %d GiB is not positive", resource, gib)
	}
	_, err := tx.Exec(ctx, `INSERT INTO billing_allocations (tenant_id, instance_id, kind, resource_id, quantity, started_at)
		VALUES ($1, $2, 'storage', $3, $4, $5) ON CONFLICT (kind, resource_id) WHERE ended_at IS NULL DO NOTHING`,
		tenant, instance, resource, gib*1024, at.UTC().Truncate(time.Second))
	if err != nil {
		return fmt.Errorf("meter: hold storage %s: %w", resource, err)
	}
	return nil
}

// Release ends a resource's open storage interval (a volume deleted).
func Release(ctx context.Context, tx Execer, resource string, at time.Time) error {
	_, err := tx.Exec(ctx, `UPDATE billing_allocations SET ended_at = greatest($2::timestamptz, started_at)
		WHERE kind = 'storage' AND resource_id = $1 AND ended_at IS NULL`, resource, at.UTC().Truncate(time.Second))
	if err != nil {
		return fmt.Errorf("meter: release storage %s: %w", resource, err)
	}
	return nil
}
