package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Image is a bootable disk image operators register: hostd fetches it from Source, verifies
// SHA256 and caches it; instances name it.
type Image struct {
	ID   uuid.UUID `json:"id"`
	Name string    `json:"name"`
	// Source is a file:// path on the hosts or an http(s):// URL (shown to operators only).
	Source         string    `json:"source,omitempty"`
	SHA256         string    `json:"sha256"`
	MinDiskGiB     int       `json:"min_disk_gib"`
	GuestLibraries bool      `json:"guest_libraries"`
	Description    string    `json:"description,omitempty"`
	CreatedAt      time.Time `json:"created_at"`
}

const imageCols = `id, name, source, sha256, min_disk_gib, guest_libraries, description, created_at`

func scanImage(row pgx.Row) (Image, error) {
	var m Image
	err := row.Scan(&m.ID, &m.Name, &m.Source, &m.SHA256, &m.MinDiskGiB, &m.GuestLibraries, &m.Description, &m.CreatedAt)
	return m, err
}

// CreateImage registers m; a live image of the same name is a unique violation.
func (s *Store) CreateImage(ctx context.Context, m *Image) error {
	m.ID = NewID()
	return s.InTx(ctx, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `INSERT INTO images (id, name, source, sha256, min_disk_gib, guest_libraries, description)
			VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING created_at`, m.ID, m.Name, m.Source, m.SHA256, m.MinDiskGiB,
			m.GuestLibraries, m.Description).Scan(&m.CreatedAt); err != nil {
			return fmt.Errorf("create image: %w", err)
		}
		return Audit(ctx, tx, uuid.Nil, "create", "image", m.ID.String(), m)
	})
}

// ListImages lists the live images by name (the list is small).
func (s *Store) ListImages(ctx context.Context) ([]Image, error) {
	return queryAll(ctx, s, "list images", scanImage, `SELECT `+imageCols+` FROM images WHERE deleted_at IS NULL ORDER BY name`)
}

// GetImage returns a live image by id.
func (s *Store) GetImage(ctx context.Context, id uuid.UUID) (Image, error) {
	return s.oneImage(ctx, `id = $1`, id)
}

// ImageByName returns the live image of that name.
func (s *Store) ImageByName(ctx context.Context, name string) (Image, error) {
	return s.oneImage(ctx, `name = $1`, name)
}

func (s *Store) oneImage(ctx context.Context, where string, arg any) (Image, error) {
	m, err := scanImage(s.Pool.QueryRow(ctx, `SELECT `+imageCols+` FROM images WHERE deleted_at IS NULL AND `+where, arg))
	if errors.Is(err, pgx.ErrNoRows) {
		return m, ErrNotFound
	}
	if err != nil {
		return m, fmt.Errorf("get image: %w", err)
	}
	return m, nil
}

// DeleteImage retires an image: new instances can no longer name it; those made from it keep it.
func (s *Store) DeleteImage(ctx context.Context, id uuid.UUID) error {
	return s.InTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE images SET deleted_at = now() WHERE id = $1 AND deleted_at IS NULL`, id)
		if err != nil {
			return fmt.Errorf("delete image: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return ErrNotFound
		}
		return Audit(ctx, tx, uuid.Nil, "delete", "image", id.String(), nil)
	})
}

// checkImage refuses a create naming no live image, or one whose minimum disk the type's disk
// does not meet.
func (s *Store) checkImage(ctx context.Context, name string, diskGiB int) error {
	m, err := s.ImageByName(ctx, name)
	if errors.Is(err, ErrNotFound) {
		return &FieldError{Field: "image", Reason: fmt.Sprintf("no image named %q (GET /v1/images lists them)", name)}
	}
	if err != nil {
		return err
	}
	if diskGiB < m.MinDiskGiB {
		return &FieldError{Field: "image", Reason: fmt.Sprintf("image %q needs a disk of at least %d GiB; the instance type has %d GiB",
			name, m.MinDiskGiB, diskGiB)}
	}
	return nil
}

// queryAll runs a query and scans every row with scan; what names the query in errors.
func queryAll[T any](ctx context.Context, s *Store, what string, scan func(pgx.Row) (T, error), sql string, args ...any) ([]T, error) {
	rows, err := s.Pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (T, error) { return scan(r) })
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}
