package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// instanceShape is what placement needs from an instance type. Instance types have no update
// or delete: their shape never changes, so it is cached for the life of the process, saving a
// query per create. The shared tier's slice can change; it is cached for sliceTTL, so a change
// reaches every apiserver replica within that time.
type instanceShape struct {
	VCPUs, MemoryMiB, DiskGiB, GPUCount int
	ModelID                             uuid.UUID
	ModelName, Tier                     string
}

const sliceTTL = 5 * time.Second

type shapeCache struct {
	shapes sync.Map // uuid.UUID -> instanceShape

	mu        sync.Mutex
	slice     int64
	sliceTime time.Time
}

func (s *Store) shape(ctx context.Context, q Execer, typeID uuid.UUID) (instanceShape, error) {
	if v, ok := s.cache.shapes.Load(typeID); ok {
		return v.(instanceShape), nil
	}
	var sh instanceShape
	var modelID *uuid.UUID
	var modelName *string
	err := q.QueryRow(ctx, `SELECT t.vcpus, t.memory_mib, t.disk_gib, t.gpu_model_id, t.gpu_count, t.tier, m.name
		FROM instance_types t LEFT JOIN gpu_models m ON m.id = t.gpu_model_id WHERE t.id = $1`, typeID).
		Scan(&sh.VCPUs, &sh.MemoryMiB, &sh.DiskGiB, &modelID, &sh.GPUCount, &sh.Tier, &modelName)
	if errors.Is(err, pgx.ErrNoRows) {
		return sh, &FieldError{Field: "instance_type_id", Reason: "no such instance type"}
	}
	if err != nil {
		return sh, fmt.Errorf("load instance type: %w", err)
	}
	if modelID != nil {
		sh.ModelID, sh.ModelName = *modelID, *modelName
	}
	s.cache.shapes.Store(typeID, sh)
	return sh, nil
}

func (s *Store) sharedSlice(ctx context.Context, q Execer) (int64, error) {
	s.cache.mu.Lock()
	defer s.cache.mu.Unlock()
	if time.Since(s.cache.sliceTime) < sliceTTL {
		return s.cache.slice, nil
	}
	var v int64
	if err := q.QueryRow(ctx, `SELECT memory_slice_bytes FROM tiers WHERE name = 'shared'`).Scan(&v); err != nil {
		return 0, fmt.Errorf("load shared tier: %w", err)
	}
	s.cache.slice, s.cache.sliceTime = v, time.Now()
	return v, nil
}

func (s *Store) forgetSlice() {
	s.cache.mu.Lock()
	s.cache.sliceTime = time.Time{}
	s.cache.mu.Unlock()
}
