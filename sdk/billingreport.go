package sdk

import (
	"context"
	"net/url"
	"strings"
	"time"
)

// BillingReportQuery selects finance's month-close report over [From, To) (zero: the current
// month), grouped by any of tier, gpu_model, tenant, instance_type (nil: by tenant).
type BillingReportQuery struct {
	From, To time.Time
	GroupBy  []string
}

func (q BillingReportQuery) values() url.Values {
	v := rangeValues(q.From, q.To)
	if q.GroupBy != nil {
		v.Set("group_by", strings.Join(q.GroupBy, ","))
	}
	return v
}

// BillingReportRow is one group: held time (charged) beside utilised GPU time (not charged).
type BillingReportRow struct {
	Group            map[string]string `json:"group"`
	HeldGPUMs        int64             `json:"held_gpu_ms"`
	HeldGPUHours     string            `json:"held_gpu_hours"`
	SliceMiBMs       int64             `json:"slice_mib_ms"`
	SliceGiBHours    string            `json:"slice_gib_hours"`
	UtilisedGPUMs    int64             `json:"utilised_gpu_ms"`
	UtilisedGPUHours string            `json:"utilised_gpu_hours"`
	VMMs             int64             `json:"vm_ms"`
	VMHours          string            `json:"vm_hours"`
	StorageMiBMs     int64             `json:"storage_mib_ms"`
	StorageGiBHours  string            `json:"storage_gib_hours"`
	RevenueCents     int64             `json:"revenue_cents"`
	Revenue          string            `json:"revenue"`
	UnpricedPieces   int64             `json:"unpriced_pieces"`
}

// BillingReport is the month-close report.
type BillingReport struct {
	From     time.Time          `json:"from"`
	To       time.Time          `json:"to"`
	GroupBy  []string           `json:"group_by"`
	Currency string             `json:"currency"`
	Rows     []BillingReportRow `json:"rows"`
	Total    BillingReportRow   `json:"total"`
}

// BillingReport fetches the month-close report (finance, operator).
func (c *Client) BillingReport(ctx context.Context, q BillingReportQuery) (BillingReport, error) {
	return do[BillingReport](ctx, c, request{op: opBillingReport, query: q.values()})
}

// BillingReportCSV fetches the same report as CSV.
func (c *Client) BillingReportCSV(ctx context.Context, q BillingReportQuery) ([]byte, error) {
	v := q.values()
	v.Set("format", "csv")
	var raw []byte
	return raw, c.call(ctx, request{op: opBillingReport, query: v, raw: &raw, accept: "text/csv"})
}
