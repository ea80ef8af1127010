package sdk

import (
	"context"
	"fmt"
	"iter"
	"net/url"
	"strconv"
	"time"
)

// Billing's routes, served by the apiserver (billing/httpapi). Tenant roles see their own
// tenant's usage and invoices only (another tenant's invoice is not found); operator and
// finance see every tenant's. Only finance adds prices and closes periods.

// UsageQuery selects a tenant's usage: [From, To) (zero: the current month), Granularity day or
// month (empty: day). TenantID is required for platform roles; tenant roles may leave it empty
// (their own tenant) and get not found for any other.
type UsageQuery struct {
	TenantID    string
	From, To    time.Time
	Granularity string
}

func (q UsageQuery) values() url.Values {
	v := rangeValues(q.From, q.To)
	if q.TenantID != "" {
		v.Set("tenant_id", q.TenantID)
	}
	if q.Granularity != "" {
		v.Set("granularity", q.Granularity)
	}
	return v
}

// rangeValues are billing's from/to parameters; a zero time leaves the server's default.
func rangeValues(from, to time.Time) url.Values {
	v := url.Values{}
	if !from.IsZero() {
		v.Set("from", from.UTC().Format(time.RFC3339))
	}
	if !to.IsZero() {
		v.Set("to", to.UTC().Format(time.RFC3339))
	}
	return v
}

// UsageRow is a tenant's usage in one bucket for one kind, tier and GPU model (gpu) or instance
// type (vm). Hours are decimal strings with 6 places; the *Ms fields are exact.
type UsageRow struct {
	Bucket       string `json:"bucket"` // YYYY-MM-DD or YYYY-MM
	Kind         string `json:"kind"`   // gpu or vm
	Tier         string `json:"tier,omitempty"`
	GPUModel     string `json:"gpu_model,omitempty"`
	InstanceType string `json:"instance_type,omitempty"`
	GPUMs        int64  `json:"gpu_ms"`
	GPUHours     string `json:"gpu_hours"`
	QuotaMiBMs   int64  `json:"quota_mib_ms"` // shared slices: memory quota MiB x ms
	VMMs         int64  `json:"vm_ms"`
	VMHours      string `json:"vm_hours"`
	Records      int64  `json:"records"`
}

// Usage is a tenant's usage over [From, To).
type Usage struct {
	TenantID string     `json:"tenant_id"`
	From     time.Time  `json:"from"`
	To       time.Time  `json:"to"`
	Rows     []UsageRow `json:"rows"`
}

// Usage returns a tenant's usage per day or month.
func (c *Client) Usage(ctx context.Context, q UsageQuery) (Usage, error) {
	return do[Usage](ctx, c, request{op: opGetUsage, query: q.values()})
}

// Price is an entry of billing's price book, in force from EffectiveFrom until the next entry
// for the same key (kind, GPU model and tier, or instance type).
type Price struct {
	ID              string    `json:"id"`
	Kind            string    `json:"kind"` // gpu, vm or storage
	GPUModel        string    `json:"gpu_model,omitempty"`
	Tier            string    `json:"tier,omitempty"`
	InstanceType    string    `json:"instance_type,omitempty"`
	Unit            string    `json:"unit"`              // gpu-hour, gib-hour, vm-hour
	UnitPriceMicros int64     `json:"unit_price_micros"` // millionths of the currency unit per unit
	Currency        string    `json:"currency"`
	EffectiveFrom   time.Time `json:"effective_from"` // a whole hour, UTC
	CreatedAt       time.Time `json:"created_at,omitzero"`
}

// AddPriceRequest adds a price entry (finance). UnitPriceMicros is a pointer because zero (free)
// is a price, and the server refuses a request without one. Entries are never replaced: a
// change is a new entry with a later EffectiveFrom.
type AddPriceRequest struct {
	Kind            string    `json:"kind"`
	GPUModel        string    `json:"gpu_model,omitempty"`
	Tier            string    `json:"tier,omitempty"`
	InstanceType    string    `json:"instance_type,omitempty"`
	UnitPriceMicros *int64    `json:"unit_price_micros"`
	Currency        string    `json:"currency,omitempty"`
	EffectiveFrom   time.Time `json:"effective_from"`
}

// ListPrices returns the whole price book (the API serves it in one page).
func (c *Client) ListPrices(ctx context.Context) (Page[Price], error) {
	return listPage[Price](ctx, c, opListPrices, nil)
}

// Prices iterates the price book.
func (c *Client) Prices(ctx context.Context) iter.Seq2[Price, error] {
	return all(ctx, func(ctx context.Context, _ string) (Page[Price], error) { return c.ListPrices(ctx) })
}

// AddPrice adds a price entry (finance); an entry for the same key and time is a conflict.
func (c *Client) AddPrice(ctx context.Context, r AddPriceRequest) (Price, error) {
	return do[Price](ctx, c, request{op: opAddPrice, body: r})
}

// Invoice is a tenant's closed month. It never changes once closed.
type Invoice struct {
	ID         string `json:"id"`
	TenantID   string `json:"tenant_id"`
	Period     string `json:"period"` // YYYY-MM
	Status     string `json:"status"`
	Currency   string `json:"currency"`
	TotalCents int64  `json:"total_cents"`
	Total      string `json:"total"` // decimal
	// CreditCents is what prepaid credit paid of the total; AmountDueCents the rest.
	CreditCents    int64         `json:"credit_cents"`
	AmountDueCents int64         `json:"amount_due_cents"`
	ClosedAt       time.Time     `json:"closed_at"`
	Lines          []InvoiceLine `json:"lines,omitempty"` // GetInvoice and ClosePeriod only
}

// InvoiceLine is one priced line: a kind/tier/model or instance type of one usage month (an
// earlier month's late usage is an Adjustment line).
type InvoiceLine struct {
	LineNo          int    `json:"line_no"`
	Description     string `json:"description"`
	Kind            string `json:"kind"`
	Tier            string `json:"tier,omitempty"`
	GPUModel        string `json:"gpu_model,omitempty"`
	InstanceType    string `json:"instance_type,omitempty"`
	UsagePeriod     string `json:"usage_period"`
	Adjustment      bool   `json:"adjustment"`
	QuantityMs      int64  `json:"quantity_ms"`
	Quantity        string `json:"quantity"` // in Unit, 6 decimals
	Unit            string `json:"unit"`
	UnitPriceMicros int64  `json:"unit_price_micros"`
	PriceID         string `json:"price_id"`
	AmountCents     int64  `json:"amount_cents"`
}

// MaxInvoices is the most invoices (or periods) one page holds; a full page's NextCursor
// names the next.
const MaxInvoices = 1000

// InvoiceListOptions filter invoice lists: TenantID (platform roles; tenant roles always see
// their own), Limit 1..MaxInvoices (0: MaxInvoices) and the previous page's Cursor.
type InvoiceListOptions struct {
	TenantID string
	Limit    int
	Cursor   string
}

// ListInvoices returns closed invoices, newest period first, without their lines.
func (c *Client) ListInvoices(ctx context.Context, o InvoiceListOptions) (Page[Invoice], error) {
	q, err := tenantLimit("invoice", o.TenantID, o.Limit)
	if err != nil {
		return Page[Invoice]{}, err
	}
	if o.Cursor != "" {
		q.Set("cursor", o.Cursor)
	}
	return listPage[Invoice](ctx, c, opListInvoices, q)
}

// tenantLimit are the tenant_id and limit parameters of billing's unpaged lists.
func tenantLimit(what, tenantID string, limit int) (url.Values, error) {
	if limit < 0 || limit > MaxInvoices {
		return nil, fmt.Errorf("sdk: %s list limit %d: want 1..%d (0: the most)", what, limit, MaxInvoices)
	}
	q := url.Values{}
	if tenantID != "" {
		q.Set("tenant_id", tenantID)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	return q, nil
}

// Invoices iterates every visible invoice (of tenantID, if not empty), newest period first,
// page after page.
func (c *Client) Invoices(ctx context.Context, tenantID string) iter.Seq2[Invoice, error] {
	return all(ctx, func(ctx context.Context, cursor string) (Page[Invoice], error) {
		return c.ListInvoices(ctx, InvoiceListOptions{TenantID: tenantID, Cursor: cursor})
	})
}

// GetInvoice returns an invoice with its lines.
func (c *Client) GetInvoice(ctx context.Context, id string) (Invoice, error) {
	return do[Invoice](ctx, c, request{op: opGetInvoice, args: []string{id}})
}

// GetInvoiceCSV returns an invoice's lines as the server's CSV: a header, then one row per line
// naming the invoice, tenant and period.
func (c *Client) GetInvoiceCSV(ctx context.Context, id string) ([]byte, error) {
	var raw []byte
	return raw, c.call(ctx, request{op: opGetInvoice, args: []string{id}, query: url.Values{"format": {"csv"}}, raw: &raw, accept: "text/csv"})
}

// Period is a tenant's month with usage or an invoice: open (Ended: it may be closed now) or
// closed with its invoice.
type Period struct {
	TenantID   string     `json:"tenant_id"`
	Period     string     `json:"period"` // YYYY-MM
	Status     string     `json:"status"` // open or closed
	Ended      bool       `json:"ended"`
	InvoiceID  string     `json:"invoice_id,omitempty"`
	TotalCents *int64     `json:"total_cents,omitempty"`
	ClosedAt   *time.Time `json:"closed_at,omitempty"`
}

// Period statuses.
const (
	PeriodOpen   = "open"
	PeriodClosed = "closed"
)

// PeriodFilter selects periods: of TenantID (platform roles; tenant roles always see their own),
// with Status PeriodOpen or PeriodClosed (empty: both), at most Limit 1..MaxInvoices (0: the
// most), newest month first, from the previous page's Cursor.
type PeriodFilter struct {
	TenantID string
	Status   string
	Limit    int
	Cursor   string
}

// ListPeriods returns months with usage or an invoice, newest first.
func (c *Client) ListPeriods(ctx context.Context, f PeriodFilter) (Page[Period], error) {
	q, err := tenantLimit("period", f.TenantID, f.Limit)
	if err != nil {
		return Page[Period]{}, err
	}
	if f.Status != "" {
		q.Set("status", f.Status)
	}
	if f.Cursor != "" {
		q.Set("cursor", f.Cursor)
	}
	return listPage[Period](ctx, c, opListPeriods, q)
}

// Periods iterates every period f selects, page after page (f.Limit is the page size).
func (c *Client) Periods(ctx context.Context, f PeriodFilter) iter.Seq2[Period, error] {
	return all(ctx, func(ctx context.Context, cursor string) (Page[Period], error) {
		f.Cursor = cursor
		return c.ListPeriods(ctx, f)
	})
}

// ClosePeriod closes a tenant's month (YYYY-MM, ended) into its final invoice (finance). A
// closed month is a conflict (ErrConflict, type "period-closed"), as are a month not yet
// ended ("period-not-ended") and usage without a price ("usage-unpriced").
func (c *Client) ClosePeriod(ctx context.Context, tenantID, period string) (Invoice, error) {
	return do[Invoice](ctx, c, request{op: opClosePeriod, body: ClosePeriodRequest{TenantID: tenantID, Period: period}})
}

// ClosePeriodRequest is the body of a period close.
type ClosePeriodRequest struct {
	TenantID string `json:"tenant_id"`
	Period   string `json:"period"` // YYYY-MM
}
