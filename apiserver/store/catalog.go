package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// GPUModel is a kind of GPU; NVMLMatch is matched against the product name gpuserverd reports.
type GPUModel struct {
	ID          uuid.UUID `json:"id" gorm:"primaryKey"`
	Name        string    `json:"name"`
	MemoryBytes int64     `json:"memory_bytes"`
	NVMLMatch   string    `json:"nvml_match" gorm:"column:nvml_match"`
	CreatedAt   time.Time `json:"created_at"`
}

// Tier is dedicated (whole GPUs) or shared (a memory slice per GPU).
type Tier struct {
	Name             string `json:"name" gorm:"primaryKey"`
	MemorySliceBytes *int64 `json:"memory_slice_bytes,omitempty"`
}

// InstanceType is a VM shape with its GPUs and hourly price (integer minor units of Currency).
type InstanceType struct {
	ID           uuid.UUID  `json:"id" gorm:"primaryKey"`
	Name         string     `json:"name"`
	VCPUs        int        `json:"vcpus" gorm:"column:vcpus"`
	MemoryMiB    int        `json:"memory_mib" gorm:"column:memory_mib"`
	DiskGiB      int        `json:"disk_gib" gorm:"column:disk_gib"`
	GPUModelID   *uuid.UUID `json:"gpu_model_id,omitempty" gorm:"column:gpu_model_id"`
	GPUCount     int        `json:"gpu_count" gorm:"column:gpu_count"`
	Tier         string     `json:"tier"`
	PricePerHour int64      `json:"price_per_hour" doc:"price per hour in integer minor units of currency (cents for USD)"`
	Currency     string     `json:"currency"`
	CreatedAt    time.Time  `json:"created_at"`
}

// CreateGPUModel inserts m.
func (s *Store) CreateGPUModel(ctx context.Context, m *GPUModel) error {
	m.ID = NewID()
	return s.InTx(ctx, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `INSERT INTO gpu_models (id, name, memory_bytes, nvml_match) VALUES ($1, $2, $3, $4) RETURNING created_at`,
			m.ID, m.Name, m.MemoryBytes, m.NVMLMatch).Scan(&m.CreatedAt); err != nil {
			return fmt.Errorf("create gpu model: %w", err)
		}
		// GPUs already reported under this product name now count as this model.
		if _, err := tx.Exec(ctx, `UPDATE gpus SET gpu_model_id = $1 WHERE gpu_model_id IS NULL AND strpos(name, $2) > 0`, m.ID, m.NVMLMatch); err != nil {
			return fmt.Errorf("match gpus to model: %w", err)
		}
		return Audit(ctx, tx, uuid.Nil, "create", "gpu-model", m.ID.String(), m)
	})
}

// ListGPUModels lists every model (the catalog is small).
func (s *Store) ListGPUModels(ctx context.Context) ([]GPUModel, error) {
	var ms []GPUModel
	if err := s.ORM.WithContext(ctx).Order("id").Find(&ms).Error; err != nil {
		return nil, fmt.Errorf("list gpu models: %w", err)
	}
	return ms, nil
}

// GetGPUModel returns one model.
func (s *Store) GetGPUModel(ctx context.Context, id uuid.UUID) (GPUModel, error) {
	return getByID[GPUModel](ctx, s, id, "gpu model")
}

// ListTiers lists the tiers.
func (s *Store) ListTiers(ctx context.Context) ([]Tier, error) {
	var ts []Tier
	if err := s.ORM.WithContext(ctx).Order("name").Find(&ts).Error; err != nil {
		return nil, fmt.Errorf("list tiers: %w", err)
	}
	return ts, nil
}

// SetSharedSlice changes the shared tier's memory slice; existing reservations keep theirs.
func (s *Store) SetSharedSlice(ctx context.Context, bytes int64) error {
	defer s.forgetSlice()
	return s.InTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE tiers SET memory_slice_bytes = $1 WHERE name = 'shared'`, bytes); err != nil {
			return fmt.Errorf("set shared slice: %w", err)
		}
		return Audit(ctx, tx, uuid.Nil, "update", "tier", "shared", map[string]any{"memory_slice_bytes": bytes})
	})
}

// CreateInstanceType inserts t.
func (s *Store) CreateInstanceType(ctx context.Context, t *InstanceType) error {
	t.ID = NewID()
	return s.InTx(ctx, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `INSERT INTO instance_types (id, name, vcpus, memory_mib, disk_gib, gpu_model_id, gpu_count,
			tier, price_per_hour, currency) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING created_at`,
			t.ID, t.Name, t.VCPUs, t.MemoryMiB, t.DiskGiB, t.GPUModelID, t.GPUCount, t.Tier, t.PricePerHour, t.Currency).
			Scan(&t.CreatedAt); err != nil {
			return fmt.Errorf("create instance type: %w", err)
		}
		return Audit(ctx, tx, uuid.Nil, "create", "instance-type", t.ID.String(), t)
	})
}

// ListInstanceTypes pages instance types.
func (s *Store) ListInstanceTypes(ctx context.Context, after uuid.UUID, limit int) ([]InstanceType, error) {
	return listPage[InstanceType](ctx, s, after, limit, "instance types", nil)
}

// GetInstanceType returns one type.
func (s *Store) GetInstanceType(ctx context.Context, id uuid.UUID) (InstanceType, error) {
	return getByID[InstanceType](ctx, s, id, "instance type")
}

// Table names are explicit: gorm's guesses for initialisms (GPU, VCPU) are not our column names.
func (GPUModel) TableName() string     { return "gpu_models" }
func (Tier) TableName() string         { return "tiers" }
func (InstanceType) TableName() string { return "instance_types" }
func (Tenant) TableName() string       { return "tenants" }
func (User) TableName() string         { return "users" }
func (APIKey) TableName() string       { return "api_keys" }
