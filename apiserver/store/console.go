package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// ConsoleLog is the tail of an instance's serial console as its host last shipped it.
type ConsoleLog struct {
	InstanceID uuid.UUID `json:"instance_id"`
	// Log is the last bytes (up to 8 KiB) of the serial console, invalid UTF-8 replaced.
	Log string `json:"log"`
	// UpdatedAt is when the host last shipped it; absent before the first.
	UpdatedAt *time.Time `json:"updated_at,omitempty"`
}

// ReadConsole returns an instance's console tail (tenant zero: any tenant's) and records in the
// audit log who read it: a console may show what the guest prints, secrets included.
func (s *Store) ReadConsole(ctx context.Context, tenant, id uuid.UUID) (ConsoleLog, error) {
	out := ConsoleLog{InstanceID: id}
	err := s.InTx(ctx, func(tx pgx.Tx) error {
		var owner uuid.UUID
		err := tx.QueryRow(ctx, `SELECT tenant_id, console_log, console_log_at FROM instances
			WHERE id = $1 AND ($2::uuid IS NULL OR tenant_id = $2)`, id, nullable(tenant)).Scan(&owner, &out.Log, &out.UpdatedAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("read console: %w", err)
		}
		return Audit(ctx, tx, owner, "read-console", "instance", id.String(), nil)
	})
	return out, err
}
