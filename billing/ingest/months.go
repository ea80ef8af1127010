package ingest

import (
	"bytes"
	"cmp"
	"slices"
	"sync"
	"time"
)

// billing_usage_months lists each (tenant, booked period) with usage. A batch adds the pairs it
// books, in the same transaction as its records, so a listed month always has its usage and a
// month with usage is always listed. A pair is written once, then never again: the ingester
// remembers the pairs it saw committed (they are never deleted), so in steady state a batch adds
// nothing and pays nothing.

// addMonthsSQL adds pairs ($1 tenants, $2 periods, sorted: two batches adding the same new pairs
// wait on each other in one order instead of deadlocking).
const addMonthsSQL = `INSERT INTO billing_usage_months (tenant_id, booked_period)
SELECT * FROM unnest($1::uuid[], $2::date[]) ON CONFLICT DO NOTHING`

// maxKnownMonths bounds the memory of pairs seen (16 bytes of tenant and a date each); past it
// the memory starts over, and the next batches re-add pairs that are already there (harmless).
const maxKnownMonths = 1 << 20

// monthKey is a (tenant, booked period) pair; the period as PostgreSQL's day number (pgDays),
// a small key to hash once per record.
type monthKey struct {
	tenant [16]byte
	period int32
}

// knownMonths is the set of pairs seen committed, shared by the ingester's batches.
type knownMonths struct {
	mu   sync.Mutex
	seen map[monthKey]struct{}
}

// missing returns the batch's pairs not yet seen committed, sorted by tenant and period.
func (k *knownMonths) missing(tenants [][16]byte, months []time.Time, book booking) []monthKey {
	var out []monthKey
	var picked map[monthKey]bool
	k.mu.Lock()
	for i, t := range tenants {
		p, _ := book.period(t, months[i])
		m := monthKey{t, pgDays(p)}
		if _, ok := k.seen[m]; ok || picked[m] {
			continue
		}
		if picked == nil {
			picked = map[monthKey]bool{}
		}
		picked[m] = true
		out = append(out, m)
	}
	k.mu.Unlock()
	slices.SortFunc(out, func(a, b monthKey) int {
		if c := bytes.Compare(a.tenant[:], b.tenant[:]); c != 0 {
			return c
		}
		return cmp.Compare(a.period, b.period)
	})
	return out
}

// committed remembers pairs whose transaction committed.
func (k *knownMonths) committed(ms []monthKey) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.seen == nil || len(k.seen)+len(ms) > maxKnownMonths {
		k.seen = make(map[monthKey]struct{}, len(ms))
	}
	for _, m := range ms {
		k.seen[m] = struct{}{}
	}
}

// monthParams are addMonthsSQL's parameters for ms, binary.
func monthParams(ms []monthKey) [][]byte {
	tenants := make([][16]byte, len(ms))
	for i, m := range ms {
		tenants[i] = m.tenant
	}
	return [][]byte{uuidArray(tenants), dateArray(len(ms), func(i int) int32 { return ms[i].period })}
}
