package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"gpucloud/billing/meter"
)

// Volume is a tenant's disk that outlives instances: it lives in one host's storage pool (fixed
// at its first attach) and is attached to at most one instance at a time, as Device in the guest.
type Volume struct {
	ID         uuid.UUID  `json:"id"`
	TenantID   uuid.UUID  `json:"tenant_id"`
	Name       string     `json:"name"`
	SizeGiB    int        `json:"size_gib" doc:"size in GiB"`
	State      string     `json:"state" doc:"available or attached"`
	HostID     *uuid.UUID `json:"host_id,omitempty" doc:"the host whose storage pool holds it; set at the first attach"`
	InstanceID *uuid.UUID `json:"instance_id,omitempty" doc:"the instance it is attached to"`
	Device     string     `json:"device,omitempty" doc:"the guest's disk while attached (vdb..vdi); /dev/disk/by-id/virtio-<first 20 characters of the id> names it too"`
	CreatedAt  time.Time  `json:"created_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
}

// Volume states, derived from the attachment.
const (
	VolumeAvailable = "available"
	VolumeAttached  = "attached"
)

// MaxVolumesPerInstance is how many volumes one instance may have attached (vdb..vdi).
const MaxVolumesPerInstance = 8

const volumeCols = `id, tenant_id, name, size_gib, host_id, instance_id, device, created_at, updated_at`

func scanVolume(row pgx.Row) (Volume, error) {
	var v Volume
	if err := row.Scan(&v.ID, &v.TenantID, &v.Name, &v.SizeGiB, &v.HostID, &v.InstanceID, &v.Device, &v.CreatedAt, &v.UpdatedAt); err != nil {
		return v, err
	}
	v.State = VolumeAvailable
	if v.InstanceID != nil {
		v.State = VolumeAttached
	}
	return v, nil
}

// volumeResource is the billing resource id of a volume's storage interval.
func volumeResource(id uuid.UUID) string { return "volume/" + id.String() }

// CreateVolume records v for its tenant, charges the tenant's volume quota and opens its storage
// interval (GiB-hours are charged while it exists), all in one transaction.
func (s *Store) CreateVolume(ctx context.Context, v *Volume) error {
	v.ID = NewID()
	return s.InTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE tenants SET used_volumes = used_volumes + 1, used_volume_gib = used_volume_gib + $2
			WHERE id = $1 AND used_volumes + 1 <= quota_volumes AND used_volume_gib + $2 <= quota_volume_gib`, v.TenantID, v.SizeGiB)
		if err != nil {
			return fmt.Errorf("charge volume quota: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return volumeQuotaError(ctx, tx, v.TenantID, v.SizeGiB)
		}
		if err := tx.QueryRow(ctx, `INSERT INTO volumes (id, tenant_id, name, size_gib) VALUES ($1, $2, $3, $4)
			RETURNING created_at, updated_at`, v.ID, v.TenantID, v.Name, v.SizeGiB).Scan(&v.CreatedAt, &v.UpdatedAt); err != nil {
			return fmt.Errorf("create volume: %w", err)
		}
		v.State = VolumeAvailable
		// The interval's instance is the volume itself: it belongs to no instance.
		if err := meter.Hold(ctx, tx, v.TenantID, v.ID, volumeResource(v.ID), int64(v.SizeGiB), s.meterTime(v.CreatedAt)); err != nil {
			return err
		}
		return Audit(ctx, tx, v.TenantID, "create", "volume", v.ID.String(), map[string]any{"name": v.Name, "size_gib": v.SizeGiB})
	})
}

// volumeQuotaError says which volume quota a refused create would have exceeded.
func volumeQuotaError(ctx context.Context, tx pgx.Tx, tenant uuid.UUID, gib int) error {
	var quotaN, quotaGiB, usedN, usedGiB int64
	if err := tx.QueryRow(ctx, `SELECT quota_volumes, quota_volume_gib, used_volumes, used_volume_gib FROM tenants WHERE id = $1`,
		tenant).Scan(&quotaN, &quotaGiB, &usedN, &usedGiB); err != nil {
		return fmt.Errorf("read volume quota: %w", err)
	}
	if usedN+1 > quotaN {
		return &QuotaError{"volumes", quotaN, usedN, 1}
	}
	return &QuotaError{"volume_gib", quotaGiB, usedGiB, int64(gib)}
}

// ListVolumes lists a tenant's volumes, oldest first.
func (s *Store) ListVolumes(ctx context.Context, tenant uuid.UUID) ([]Volume, error) {
	return queryAll(ctx, s, "list volumes", scanVolume, `SELECT `+volumeCols+` FROM volumes
		WHERE tenant_id = $1 AND deleted_at IS NULL ORDER BY id`, tenant)
}

// GetVolume returns one of tenant's volumes; another tenant's is ErrNotFound.
func (s *Store) GetVolume(ctx context.Context, tenant, id uuid.UUID) (Volume, error) {
	v, err := scanVolume(s.Pool.QueryRow(ctx, `SELECT `+volumeCols+` FROM volumes
		WHERE id = $1 AND tenant_id = $2 AND deleted_at IS NULL`, id, tenant))
	if errors.Is(err, pgx.ErrNoRows) {
		return v, ErrNotFound
	}
	if err != nil {
		return v, fmt.Errorf("get volume: %w", err)
	}
	return v, nil
}

func lockVolume(ctx context.Context, tx pgx.Tx, tenant, id uuid.UUID) (Volume, error) {
	v, err := scanVolume(tx.QueryRow(ctx, `SELECT `+volumeCols+` FROM volumes
		WHERE id = $1 AND tenant_id = $2 AND deleted_at IS NULL FOR UPDATE`, id, tenant))
	if errors.Is(err, pgx.ErrNoRows) {
		return v, ErrNotFound
	}
	if err != nil {
		return v, fmt.Errorf("lock volume: %w", err)
	}
	return v, nil
}

// AttachVolume attaches one of tenant's volumes to one of its instances on the volume's host
// (any host for a volume never attached). The host hotplugs it into a running VM, or adds it at
// the next start. Attaching it again to the same instance changes nothing.
func (s *Store) AttachVolume(ctx context.Context, tenant, id, instance uuid.UUID) (Volume, error) {
	var v Volume
	err := s.InTx(ctx, func(tx pgx.Tx) error {
		var err error
		if v, err = lockVolume(ctx, tx, tenant, id); err != nil {
			return err
		}
		if v.InstanceID != nil {
			if *v.InstanceID == instance {
				return nil
			}
			return &ConflictError{Msg: fmt.Sprintf("volume is attached to instance %s; detach it first", v.InstanceID)}
		}
		inst, err := lockInstance(ctx, tx, `id = $1 AND tenant_id = $2`, instance, tenant)
		if errors.Is(err, ErrNotFound) {
			return &FieldError{Field: "instance_id", Reason: "no such instance of yours"}
		}
		if err != nil {
			return err
		}
		switch inst.State {
		case StateDeleting, StateDeleted, StateFailed:
			return &StateError{State: inst.State, Action: "attach a volume to"}
		}
		if v.HostID != nil && *v.HostID != inst.HostID {
			return &ConflictError{Msg: fmt.Sprintf("volume lives on host %s and instance %s is on host %s: attach it to an instance on its host", v.HostID, inst.ID, inst.HostID)}
		}
		device, err := freeDevice(ctx, tx, inst.ID)
		if err != nil {
			return err
		}
		if v, err = scanVolume(tx.QueryRow(ctx, `UPDATE volumes SET instance_id = $2, host_id = $3, device = $4, updated_at = now()
			WHERE id = $1 RETURNING `+volumeCols, id, inst.ID, inst.HostID, device)); err != nil {
			return fmt.Errorf("attach volume: %w", err)
		}
		return Audit(ctx, tx, tenant, "attach", "volume", id.String(), map[string]any{"instance_id": inst.ID, "device": device})
	})
	return v, err
}

// freeDevice is the first of vdb..vdi that no volume of instance uses.
func freeDevice(ctx context.Context, tx pgx.Tx, instance uuid.UUID) (string, error) {
	rows, err := tx.Query(ctx, `SELECT device FROM volumes WHERE instance_id = $1`, instance)
	if err != nil {
		return "", fmt.Errorf("devices of %s: %w", instance, err)
	}
	used, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", fmt.Errorf("devices of %s: %w", instance, err)
	}
	taken := map[string]bool{}
	for _, d := range used {
		taken[d] = true
	}
	for c := 'b'; c < 'b'+MaxVolumesPerInstance; c++ {
		if d := "vd" + string(c); !taken[d] {
			return d, nil
		}
	}
	return "", &ConflictError{Msg: fmt.Sprintf("instance %s has %d volumes attached, the most it may have", instance, MaxVolumesPerInstance)}
}

// DetachVolume detaches one of tenant's volumes (a detached one stays as it is). The host
// unplugs it from a running VM; its data and its host stay.
func (s *Store) DetachVolume(ctx context.Context, tenant, id uuid.UUID) (Volume, error) {
	var v Volume
	err := s.InTx(ctx, func(tx pgx.Tx) error {
		var err error
		if v, err = lockVolume(ctx, tx, tenant, id); err != nil || v.InstanceID == nil {
			return err
		}
		from := *v.InstanceID
		if v, err = scanVolume(tx.QueryRow(ctx, `UPDATE volumes SET instance_id = NULL, device = '', updated_at = now()
			WHERE id = $1 RETURNING `+volumeCols, id)); err != nil {
			return fmt.Errorf("detach volume: %w", err)
		}
		return Audit(ctx, tx, tenant, "detach", "volume", id.String(), map[string]any{"instance_id": from})
	})
	return v, err
}

// DeleteVolume deletes one of tenant's detached volumes: its quota is given back, its storage
// interval ends, and its host deletes the data. An attached volume is refused.
func (s *Store) DeleteVolume(ctx context.Context, tenant, id uuid.UUID) error {
	return s.InTx(ctx, func(tx pgx.Tx) error {
		v, err := lockVolume(ctx, tx, tenant, id)
		if err != nil {
			return err
		}
		if v.InstanceID != nil {
			return &ConflictError{Msg: fmt.Sprintf("volume is attached to instance %s; detach it first", v.InstanceID)}
		}
		var at time.Time
		if err := tx.QueryRow(ctx, `UPDATE volumes SET deleted_at = now(), updated_at = now() WHERE id = $1 RETURNING deleted_at`, id).Scan(&at); err != nil {
			return fmt.Errorf("delete volume: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE tenants SET used_volumes = used_volumes - 1, used_volume_gib = used_volume_gib - $2 WHERE id = $1`,
			tenant, v.SizeGiB); err != nil {
			return fmt.Errorf("uncharge volume quota: %w", err)
		}
		if err := meter.Release(ctx, tx, volumeResource(id), s.meterTime(at)); err != nil {
			return err
		}
		return Audit(ctx, tx, tenant, "delete", "volume", id.String(), nil)
	})
}

// detachAll detaches every volume of an instance that is gone (deleted): volumes outlive it.
func detachAll(ctx context.Context, tx pgx.Tx, instance uuid.UUID) error {
	if _, err := tx.Exec(ctx, `UPDATE volumes SET instance_id = NULL, device = '', updated_at = now() WHERE instance_id = $1`, instance); err != nil {
		return fmt.Errorf("detach volumes of %s: %w", instance, err)
	}
	return nil
}

// HostVolume is a volume in a host's storage pool and, when attached, where.
type HostVolume struct {
	ID         uuid.UUID
	SizeGiB    int
	InstanceID *uuid.UUID
	Device     string
}

// HostVolumes lists the live volumes whose data lives on host, and those of instances a host
// drain is moving onto host (their data is copied there).
func (s *Store) HostVolumes(ctx context.Context, host uuid.UUID) ([]HostVolume, error) {
	return queryAll(ctx, s, "host volumes", func(r pgx.Row) (HostVolume, error) {
		var v HostVolume
		err := r.Scan(&v.ID, &v.SizeGiB, &v.InstanceID, &v.Device)
		return v, err
	}, `SELECT id, size_gib, instance_id, device FROM volumes
		WHERE (host_id = $1 OR instance_id IN (`+movingIn+`)) AND deleted_at IS NULL ORDER BY id`, host)
}

// meterTime dates an allocation: the transaction's time, or the test clock when one is set.
func (s *Store) meterTime(txTime time.Time) time.Time {
	if s.clock != nil {
		return s.clock()
	}
	return txTime
}
