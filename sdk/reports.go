package sdk

import (
	"context"
	"net/url"
	"time"
)

// GPUHoursQuery selects a GPU-hour report: [From, To) (zero: the current month), GroupBy
// tier, gpu_model or tenant (empty: tier), Granularity day or month (empty: day).
type GPUHoursQuery struct {
	From, To    time.Time
	GroupBy     string
	Granularity string
}

func (q GPUHoursQuery) values() url.Values {
	v := rangeValues(q.From, q.To)
	if q.GroupBy != "" {
		v.Set("group_by", q.GroupBy)
	}
	if q.Granularity != "" {
		v.Set("granularity", q.Granularity)
	}
	return v
}

// ReportRow is one bucket and group of a report.
type ReportRow struct {
	Bucket        string `json:"bucket"` // YYYY-MM-DD or YYYY-MM
	Group         string `json:"group"`
	GPUMs         int64  `json:"gpu_ms"`
	GPUHours      string `json:"gpu_hours"`
	Records       int64  `json:"records"`
	RevenueCents  int64  `json:"revenue_cents"`
	Revenue       string `json:"revenue"`
	UnpricedGPUMs int64  `json:"unpriced_gpu_ms"`
}

// GPUHoursReport is billing's GPU-hour and revenue report.
type GPUHoursReport struct {
	From        time.Time   `json:"from"`
	To          time.Time   `json:"to"`
	GroupBy     string      `json:"group_by"`
	Granularity string      `json:"granularity"`
	Currency    string      `json:"currency"`
	Rows        []ReportRow `json:"rows"`
	Total       ReportRow   `json:"total"`
}

// GPUHours fetches the GPU-hour report (finance, operator). Served by billing.
func (c *Client) GPUHours(ctx context.Context, q GPUHoursQuery) (GPUHoursReport, error) {
	return do[GPUHoursReport](ctx, c, request{op: opGPUHoursReport, query: q.values()})
}

// GPUHoursCSV fetches the same report as CSV.
func (c *Client) GPUHoursCSV(ctx context.Context, q GPUHoursQuery) ([]byte, error) {
	v := q.values()
	v.Set("format", "csv")
	var raw []byte
	return raw, c.call(ctx, request{op: opGPUHoursReport, query: v, raw: &raw, accept: "text/csv"})
}
