package invoice

import (
	"encoding/base64"
	"errors"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Cursor is where a list of invoices or periods (newest month first, then tenant) resumes: after
// the month and tenant of the previous page's last item. Its text form is opaque to clients.
type Cursor struct {
	Period time.Time
	Tenant uuid.UUID
}

// ErrBadCursor is a cursor this server did not make.
var ErrBadCursor = errors.New("is not a cursor from a previous page")

// String encodes c.
func (c Cursor) String() string {
	return base64.RawURLEncoding.EncodeToString([]byte(c.Period.Format("2006-01") + "|" + c.Tenant.String()))
}

// ParseCursor decodes a cursor's text form.
func ParseCursor(v string) (*Cursor, error) {
	raw, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil {
		return nil, ErrBadCursor
	}
	month, tenant, ok := strings.Cut(string(raw), "|")
	if !ok {
		return nil, ErrBadCursor
	}
	p, err := ParsePeriod(month)
	if err != nil {
		return nil, ErrBadCursor
	}
	t, err := uuid.Parse(tenant)
	if err != nil {
		return nil, ErrBadCursor
	}
	return &Cursor{Period: p, Tenant: t}, nil
}

// cursorArgs are the cursor as two nullable SQL parameters.
func cursorArgs(c *Cursor) (*time.Time, *uuid.UUID) {
	if c == nil {
		return nil, nil
	}
	return &c.Period, &c.Tenant
}
