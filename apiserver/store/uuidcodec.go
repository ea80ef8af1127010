package store

import (
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
	if id, ok := value.(uuid.UUID); ok {
		return &uuidEncodePlan{}, [16]byte(id), true
	}
	return nil, nil, false
}

type uuidEncodePlan struct{ next pgtype.EncodePlan }

func (p *uuidEncodePlan) SetNext(next pgtype.EncodePlan) { p.next = next }

func (p *uuidEncodePlan) Encode(value any, buf []byte) ([]byte, error) {
	return p.next.Encode([16]byte(value.(uuid.UUID)), buf)
}
