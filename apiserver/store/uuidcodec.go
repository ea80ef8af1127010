package store

import (
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// pgx encodes a uuid.UUID through its driver.Valuer: to a string, then parsed back to 16 bytes.
// A create sends a dozen ids, and that round trip through text showed up at ~10% of the
// apiserver's CPU, so uuid.UUID is handed to pgx as the [16]byte it is.
func registerUUID(m *pgtype.Map) {
	m.TryWrapEncodePlanFuncs = append([]pgtype.TryWrapEncodePlanFunc{tryWrapUUID}, m.TryWrapEncodePlanFuncs...)
}

func tryWrapUUID(value any) (pgtype.WrappedEncodePlanNextSetter, any, bool) {
	switch id := value.(type) {
	case uuid.UUID:
		return &uuidEncodePlan{}, [16]byte(id), true
	case *uuid.UUID: // never nil here: pgx encodes nil pointers as NULL before planning
		return &uuidEncodePlan{}, [16]byte(*id), true
	}
	return nil, nil, false
}

type uuidEncodePlan struct{ next pgtype.EncodePlan }

func (p *uuidEncodePlan) SetNext(next pgtype.EncodePlan) { p.next = next }

func (p *uuidEncodePlan) Encode(value any, buf []byte) ([]byte, error) {
	switch id := value.(type) {
	case uuid.UUID:
		return p.next.Encode([16]byte(id), buf)
	case *uuid.UUID:
		return p.next.Encode([16]byte(*id), buf)
	}
	return nil, fmt.Errorf("store: %T is not a uuid", value)
}
