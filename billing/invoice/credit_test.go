package invoice_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"gpucloud/billing/billingtest"
	"gpucloud/billing/credit"
)

// Prepaid credit pays a closed invoice in priority order, then soonest expiry; a grant expired
// before the month began pays nothing; what is left is due.
func TestCreditsDrawnInPriorityAndExpiryOrder(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	standardPrices(t, e)
	tenant := uuid.New()
	e.hold(t, billingtest.Dedicated(tenant, 1, march.AddDate(0, 0, 2), 5*time.Hour)) // 5 h x 4.00 = 20.00
	cs := credit.New(e.pool)
	feb := march.AddDate(0, -1, 0)
	at := func(t time.Time) *time.Time { return &t }
	grant := func(cents int64, prio int, exp *time.Time) uuid.UUID {
		t.Helper()
		g, err := cs.AddGrant(ctx, credit.Grant{TenantID: tenant, AmountCents: cents, Priority: prio, ExpiresAt: exp}, feb)
		if err != nil {
			t.Fatal(err)
		}
		return g.ID
	}
	late := grant(1000, 100, nil)                        // drawn last: lowest priority
	may := grant(300, 10, at(march.AddDate(0, 2, 0)))    // second: same priority, expires later
	april := grant(200, 10, at(march.AddDate(0, 1, 14))) // first: soonest to expire
	expired := grant(5000, 0, at(feb.AddDate(0, 0, 20))) // expired before March: never drawn
	other := uuid.New()
	if _, err := cs.AddGrant(ctx, credit.Grant{TenantID: other, AmountCents: 9999}, feb); err != nil {
		t.Fatal(err)
	}
	inv, err := e.inv.Close(ctx, tenant, march)
	if err != nil {
		t.Fatal(err)
	}
	if inv.TotalCents != 2000 || inv.CreditCents != 1500 || inv.AmountDueCents != 500 {
		t.Fatalf("invoice %+v, want 20.00 of which 15.00 from credit", inv)
	}
	grants, err := cs.Grants(ctx, &tenant)
	if err != nil {
		t.Fatal(err)
	}
	left := map[uuid.UUID]int64{}
	for _, g := range grants {
		left[g.ID] = g.RemainingCents
	}
	if left[april] != 0 || left[may] != 0 || left[late] != 0 || left[expired] != 5000 {
		t.Fatalf("remaining %v", left)
	}
	var drawn []int64
	rows, err := e.pool.Query(ctx, `SELECT a.amount_cents FROM billing_credit_applications a JOIN billing_credit_grants g ON g.id = a.grant_id
		WHERE a.invoice_id = $1 ORDER BY g.priority, g.expires_at NULLS LAST`, inv.ID)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n int64
		_ = rows.Scan(&n)
		drawn = append(drawn, n)
	}
	if len(drawn) != 3 || drawn[0] != 200 || drawn[1] != 300 || drawn[2] != 1000 {
		t.Fatalf("drawn %v, want 200, 300, 1000", drawn)
	}
	// Read back, the invoice says the same.
	back, err := e.inv.Get(ctx, inv.ID, &tenant)
	if err != nil || back.CreditCents != 1500 || back.AmountDueCents != 500 {
		t.Fatalf("read back %+v %v", back, err)
	}
}

// When credit covers only part of what grants hold, the order decides which grants are left:
// priority first (a low-priority grant expiring soonest waits), then the soonest expiry, grants
// that never expire last within their priority; the grant drawn last is drawn only in part.
func TestCreditsDrawnPartlyInOrder(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	standardPrices(t, e)
	tenant := uuid.New()
	e.hold(t, billingtest.Dedicated(tenant, 1, march.AddDate(0, 0, 2), 5*time.Hour)) // 20.00
	cs := credit.New(e.pool)
	feb := march.AddDate(0, -1, 0)
	at := func(t time.Time) *time.Time { return &t }
	grant := func(cents int64, prio int, exp *time.Time) uuid.UUID {
		t.Helper()
		g, err := cs.AddGrant(ctx, credit.Grant{TenantID: tenant, AmountCents: cents, Priority: prio, ExpiresAt: exp}, feb)
		if err != nil {
			t.Fatal(err)
		}
		return g.ID
	}
	never := grant(1000, 10, nil)                        // same priority, never expires: after the dated ones
	last := grant(1000, 100, at(march.AddDate(0, 1, 1))) // expires soonest of all, but lowest priority
	later := grant(900, 10, at(march.AddDate(0, 2, 0)))  // third: drawn in part
	sooner := grant(900, 10, at(march.AddDate(0, 1, 14)))
	first := grant(600, 5, nil) // highest priority
	inv, err := e.inv.Close(ctx, tenant, march)
	if err != nil {
		t.Fatal(err)
	}
	if inv.TotalCents != 2000 || inv.CreditCents != 2000 || inv.AmountDueCents != 0 {
		t.Fatalf("invoice %+v, want 20.00 paid by credit", inv)
	}
	grants, err := cs.Grants(ctx, &tenant)
	if err != nil {
		t.Fatal(err)
	}
	left := map[uuid.UUID]int64{}
	for _, g := range grants {
		left[g.ID] = g.RemainingCents
	}
	want := map[uuid.UUID]int64{first: 0, sooner: 0, later: 400, never: 1000, last: 1000}
	for id, w := range want {
		if left[id] != w {
			t.Errorf("grant %s: %d left, want %d (all: %v)", id, left[id], w, left)
		}
	}
}
