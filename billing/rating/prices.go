// Package rating holds the price book and turns hourly usage into priced line items.
//
// Money is integers: prices are micro-units (millionths of the currency unit) per unit-hour,
// amounts are cents. A line item's amount is its exact value rounded once, half away from zero,
// to the cent; an invoice's total is the sum of its rounded lines, so the two always reconcile.
//
// Units: dedicated GPUs pay per GPU-hour (gpu_count x hours); shared sessions pay per GiB-hour of
// their memory quota (the slice they hold: quota MiB / 1024 x gpu_count x hours); VMs pay per
// VM-hour of their instance type.
package rating

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Price is one entry of the price book: in force from EffectiveFrom until the next entry for the
// same key.
type Price struct {
	ID              uuid.UUID `json:"id"`
	Kind            string    `json:"kind"` // gpu, vm or storage
	GPUModel        string    `json:"gpu_model,omitempty"`
	Tier            string    `json:"tier,omitempty"`
	InstanceType    string    `json:"instance_type,omitempty"`
	Unit            string    `json:"unit"`                // gpu-hour, gib-hour, vm-hour
	UnitPriceMicros int64     `json:"unit_price_micros"`   // millionths of the currency unit per unit
	Currency        string    `json:"currency"`            // ISO 4217
	EffectiveFrom   time.Time `json:"effective_from"`      // a whole hour, UTC
	CreatedAt       time.Time `json:"created_at,omitzero"` // when finance entered it
}

// Unit names the unit a kind and tier is priced by.
func Unit(kind, tier string) string {
	switch {
	case kind == "vm":
		return "vm-hour"
	case kind == "storage" || tier == "shared":
		return "gib-hour"
	default:
		return "gpu-hour"
	}
}

// FieldError names the input field a price was refused for.
type FieldError struct{ Field, Reason string }

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// ErrPriceExists is returned when a price for the same key and effective time already exists:
// entries are never overwritten, a change is a new entry with a later effective time.
var ErrPriceExists = errors.New("a price for this key and effective_from already exists")

// MaxUnitPriceMicros bounds prices (10,000 currency units per unit-hour) so amounts cannot overflow.
const MaxUnitPriceMicros = 10_000 * 1_000_000

// Normalize checks p and clears the fields that do not apply to its kind.
func Normalize(p Price) (Price, error) {
	switch p.Kind {
	case "gpu":
		if p.GPUModel == "" || len(p.GPUModel) > 128 {
			return p, &FieldError{"gpu_model", "is required for a gpu price (at most 128 bytes)"}
		}
		if p.Tier != "dedicated" && p.Tier != "shared" {
			return p, &FieldError{"tier", fmt.Sprintf("%q is neither dedicated nor shared", p.Tier)}
		}
		p.InstanceType = ""
	case "vm":
		if p.InstanceType == "" || len(p.InstanceType) > 128 {
			return p, &FieldError{"instance_type", "is required for a vm price (at most 128 bytes)"}
		}
		p.GPUModel, p.Tier = "", ""
	case "storage":
		// One price per GiB-hour for every disk (root disks and volumes).
		p.GPUModel, p.Tier, p.InstanceType = "", "", ""
	default:
		return p, &FieldError{"kind", fmt.Sprintf("%q is not one of gpu, vm, storage", p.Kind)}
	}
	if p.UnitPriceMicros < 0 || p.UnitPriceMicros > MaxUnitPriceMicros {
		return p, &FieldError{"unit_price_micros", fmt.Sprintf("%d is outside 0..%d", p.UnitPriceMicros, MaxUnitPriceMicros)}
	}
	if p.Currency == "" {
		p.Currency = "USD"
	}
	if p.Currency != "USD" {
		return p, &FieldError{"currency", fmt.Sprintf("%q is not supported (USD only)", p.Currency)}
	}
	if p.EffectiveFrom.IsZero() {
		return p, &FieldError{"effective_from", "is required"}
	}
	p.EffectiveFrom = p.EffectiveFrom.UTC()
	if !p.EffectiveFrom.Truncate(time.Hour).Equal(p.EffectiveFrom) {
		return p, &FieldError{"effective_from", "must be a whole hour (usage is rated per hour)"}
	}
	p.Unit = Unit(p.Kind, p.Tier)
	return p, nil
}

// Book is the price book in PostgreSQL.
type Book struct{ pool *pgxpool.Pool }

// NewBook returns the price book on pool.
func NewBook(pool *pgxpool.Pool) *Book { return &Book{pool: pool} }

// Add stores a new price entry.
func (b *Book) Add(ctx context.Context, p Price) (Price, error) {
	p, err := Normalize(p)
	if err != nil {
		return p, err
	}
	err = b.pool.QueryRow(ctx, `
		INSERT INTO billing_prices (kind, gpu_model, tier, instance_type, unit_price_micros, currency, effective_from)
		VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id, created_at`,
		p.Kind, p.GPUModel, p.Tier, p.InstanceType, p.UnitPriceMicros, p.Currency, p.EffectiveFrom).Scan(&p.ID, &p.CreatedAt)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return p, ErrPriceExists
	}
	if err != nil {
		return p, fmt.Errorf("rating: add price: %w", err)
	}
	return p, nil
}

// List returns every entry, ordered by key and effective time.
func (b *Book) List(ctx context.Context) ([]Price, error) {
	rows, err := b.pool.Query(ctx, `
		SELECT id, kind, gpu_model, tier, instance_type, unit_price_micros, currency, effective_from, created_at
		FROM billing_prices ORDER BY kind, gpu_model, tier, instance_type, effective_from`)
	if err != nil {
		return nil, fmt.Errorf("rating: list prices: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Price, error) {
		var p Price
		err := r.Scan(&p.ID, &p.Kind, &p.GPUModel, &p.Tier, &p.InstanceType, &p.UnitPriceMicros, &p.Currency, &p.EffectiveFrom, &p.CreatedAt)
		p.EffectiveFrom, p.CreatedAt = p.EffectiveFrom.UTC(), p.CreatedAt.UTC()
		p.Unit = Unit(p.Kind, p.Tier)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("rating: list prices: %w", err)
	}
	return out, nil
}
