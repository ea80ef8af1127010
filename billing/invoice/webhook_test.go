package invoice_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"gpucloud/billing/billingtest"
	"gpucloud/billing/credit"
	"gpucloud/billing/webhook"
)

// Closing a month queues invoice.closed in the close's transaction: the tenant's endpoint gets
// one signed delivery naming the invoice, its total and the credit drawn; an endpoint of another
// tenant, and one of this tenant not subscribed to the event, get nothing; a refused second close
// sends nothing more.
func TestInvoiceClosedDelivered(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	standardPrices(t, e)
	tenant, other := uuid.New(), uuid.New()
	e.hold(t, billingtest.Dedicated(tenant, 1, march.Add(time.Hour), 3*time.Hour)) // 12.00
	if _, err := credit.New(e.pool).AddGrant(ctx, credit.Grant{TenantID: tenant, AmountCents: 500}, march); err != nil {
		t.Fatal(err)
	}
	hooks := webhook.NewStore(e.pool)
	mine, theirs, unsubscribed := billingtest.NewReceiver(t), billingtest.NewReceiver(t), billingtest.NewReceiver(t)
	ep, err := hooks.Create(ctx, &tenant, mine.URL, []string{webhook.InvoiceClosed})
	if err != nil {
		t.Fatal(err)
	}
	mine.SetSecret(ep.Secret)
	if _, err := hooks.Create(ctx, &other, theirs.URL, []string{webhook.InvoiceClosed}); err != nil {
		t.Fatal(err)
	}
	if _, err := hooks.Create(ctx, &tenant, unsubscribed.URL, []string{webhook.BudgetThreshold}); err != nil {
		t.Fatal(err)
	}

	inv, err := e.inv.Close(ctx, tenant, march)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.inv.Close(ctx, tenant, march); err == nil {
		t.Fatal("second close succeeded")
	}
	billingtest.DeliverAll(t, e.pool)
	got := mine.Got()
	if len(got) != 1 {
		t.Fatalf("%d deliveries, want 1: %+v", len(got), got)
	}
	d := got[0]
	if d.Event != webhook.InvoiceClosed || d.Header != webhook.InvoiceClosed || d.SigErr != nil {
		t.Fatalf("delivery %+v: want a signed invoice.closed", d)
	}
	if d.Data["invoice_id"] != inv.ID.String() || d.Data["period"] != "2026-03" || d.Data["total_cents"] != float64(1200) ||
		d.Data["credit_cents"] != float64(500) || d.Data["amount_due_cents"] != float64(700) {
		t.Fatalf("payload %v, want invoice %s for 2026-03: 1200 total, 500 credit, 700 due", d.Data, inv.ID)
	}
	if n, m := len(theirs.Got()), len(unsubscribed.Got()); n != 0 || m != 0 {
		t.Fatalf("another tenant's endpoint got %d, an unsubscribed one %d", n, m)
	}
}
