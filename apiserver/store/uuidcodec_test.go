package store

import (
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// uuid.UUID and *uuid.UUID encode to the same bytes as pgx's own driver.Valuer path would give,
// in both formats, without going through it.
func TestUUIDEncoding(t *testing.T) {
	fast, plain := pgtype.NewMap(), pgtype.NewMap()
	registerUUID(fast)
	id := uuid.New()
	for _, v := range []any{id, &id} {
		for _, format := range []int16{pgtype.TextFormatCode, pgtype.BinaryFormatCode} {
			if _, ok := fast.PlanEncode(pgtype.UUIDOID, format, v).(*uuidEncodePlan); !ok {
				t.Errorf("%T format %d: plan %T, want *uuidEncodePlan", v, format, fast.PlanEncode(pgtype.UUIDOID, format, v))
			}
			got, err := fast.Encode(pgtype.UUIDOID, format, v, nil)
			if err != nil {
				t.Fatal(err)
			}
			want, err := plain.Encode(pgtype.UUIDOID, format, v, nil)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Errorf("%T format %d: %q, want %q", v, format, got, want)
			}
		}
	}
	var nilID *uuid.UUID
	if b, err := fast.Encode(pgtype.UUIDOID, pgtype.BinaryFormatCode, nilID, nil); err != nil || b != nil {
		t.Errorf("nil *uuid.UUID: %q %v, want NULL", b, err)
	}
}
