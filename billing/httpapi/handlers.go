package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"gpucloud/api"
	"gpucloud/billing/credit"
	"gpucloud/billing/invoice"
	"gpucloud/billing/rating"
	"gpucloud/billing/report"
	"gpucloud/billing/webhook"
	"gpucloud/internal/authn"
	"gpucloud/internal/problem"
	"gpucloud/internal/validate"
)

// maxUsageBody bounds a usage batch: 1,000 records of well under 2 KiB each.
const maxUsageBody = 4 << 20

// postUsage takes a daemon's usage batch, in JSON or in the binary form (api.UsageBatchBinary):
// a record of the wrong JSON shape is refused with its reason like any other malformed record
// while the rest of the batch lands (decodeUsage); a binary body that cannot be read whole is
// refused whole. Either way the same checks follow.
func (s *Service) postUsage(c *gin.Context) {
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, maxUsageBody))
	if err != nil {
		fail(c, badBody(err))
		return
	}
	d, bad := decodeUsageAs(c.ContentType(), body)
	if bad != nil {
		fail(c, bad)
		return
	}
	batch, index, undecodable := d.batch, d.index, d.undecodable
	var res api.UsageBatchResult
	p := principal(c)
	daemon := p.DaemonID.String()
	placed, err := s.cp.AuthorizeUsage(c.Request.Context(), p, batch.Records)
	if err == nil {
		res, err = s.ingest.Ingest(c.Request.Context(), batch, func(i int, r api.UsageRecord) string {
			if reason := mayReport(p, r); reason != "" {
				return reason
			}
			return placed[i]
		})
	}
	if err != nil {
		// Nothing of the batch landed; the daemon keeps it and sends it again.
		s.log.ErrorContext(c.Request.Context(), "usage batch failed", "daemon", daemon, "err", err)
		d := problem.New(http.StatusServiceUnavailable, "usage-store-unavailable", "Usage not stored", "retry the batch")
		d.Retryable = true
		fail(c, d)
		return
	}
	for i := range res.Rejected {
		res.Rejected[i].Index = index[res.Rejected[i].Index]
	}
	res.Rejected = append(undecodable, res.Rejected...)
	sort.Slice(res.Rejected, func(i, j int) bool { return res.Rejected[i].Index < res.Rejected[j].Index })
	if len(res.Rejected) > 0 {
		s.log.WarnContext(c.Request.Context(), "usage records rejected", "daemon", daemon,
			"rejected", len(res.Rejected), "first", res.Rejected[0].Reason)
	}
	c.JSON(http.StatusOK, res)
}

// mayReport refuses what the calling daemon may never report, whatever the instance: records of
// another source, ids outside the daemon's namespace ("<daemon id>/...", so no daemon can make
// another's record a duplicate), and the other kind of usage (a host reports VM usage, a GPU
// server GPU usage).
func mayReport(p authn.Principal, r api.UsageRecord) string {
	daemon := p.DaemonID.String()
	switch {
	case r.Source != daemon:
		return fmt.Sprintf("source: %q is not the authenticated daemon %s", r.Source, daemon)
	case !strings.HasPrefix(r.ID, daemon+"/"):
		return fmt.Sprintf("id: %q is outside this daemon's namespace %q", r.ID, daemon+"/")
	case p.Daemon == authn.DaemonHost && r.Kind != api.UsageVM:
		return fmt.Sprintf("kind: a host reports %q usage, not %q", api.UsageVM, r.Kind)
	case p.Daemon == authn.DaemonGPUServer && r.Kind != api.UsageGPU:
		return fmt.Sprintf("kind: a GPU server reports %q usage, not %q", api.UsageGPU, r.Kind)
	case p.Daemon != authn.DaemonHost && p.Daemon != authn.DaemonGPUServer:
		return "source: the credential is neither a host's nor a GPU server's"
	}
	return ""
}

func badBody(err error) *problem.Details {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return problem.New(http.StatusRequestEntityTooLarge, "body-too-large", "Request body too large",
			fmt.Sprintf("at most %d bytes", tooBig.Limit))
	}
	return problem.Validation(problem.FieldError{Field: "body", Reason: "is not valid JSON: " + err.Error()})
}

// decodeStrict reads a small JSON object, refusing unknown fields (a typo must not pass silently)
// and what the apiserver's binding refuses: bytes that are not UTF-8, NUL bytes, numbers past
// their column's range, missing required fields (validate.JSONObject, validate.Decoded).
func decodeStrict(c *gin.Context, v any) *problem.Details {
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, 64<<10))
	if err != nil {
		return badBody(err)
	}
	if fe := validate.JSONObject(body); fe != nil {
		return problem.Validation(problem.FieldError{Field: fe.Field, Reason: fe.Reason})
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badBody(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return problem.Validation(problem.FieldError{Field: "body", Reason: "has data after the JSON object"})
	}
	if fe := validate.Decoded(v); fe != nil {
		return problem.Validation(problem.FieldError{Field: fe.Field, Reason: fe.Reason})
	}
	return nil
}

// parseTime accepts RFC 3339, a date (YYYY-MM-DD) or a month (YYYY-MM), all UTC.
func parseTime(field, v string) (time.Time, *problem.Details) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02", "2006-01"} {
		if t, err := time.Parse(layout, v); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, problem.Validation(problem.FieldError{Field: field, Reason: fmt.Sprintf("%q is not RFC 3339, YYYY-MM-DD or YYYY-MM", v)})
}

// timeRange reads from and to, defaulting to the current month.
func (s *Service) timeRange(c *gin.Context) (time.Time, time.Time, *problem.Details) {
	now := s.now().UTC()
	from := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	to := from.AddDate(0, 1, 0)
	var d *problem.Details
	if v := c.Query("from"); v != "" {
		if from, d = parseTime("from", v); d != nil {
			return from, to, d
		}
	}
	if v := c.Query("to"); v != "" {
		if to, d = parseTime("to", v); d != nil {
			return from, to, d
		}
	}
	return from, to, nil
}

func fieldProblem(err error) *problem.Details {
	var rf *report.FieldError
	if errors.As(err, &rf) {
		return problem.Validation(problem.FieldError{Field: rf.Field, Reason: rf.Reason})
	}
	var pf *rating.FieldError
	if errors.As(err, &pf) {
		return problem.Validation(problem.FieldError{Field: pf.Field, Reason: pf.Reason})
	}
	var cf *credit.FieldError
	if errors.As(err, &cf) {
		return problem.Validation(problem.FieldError{Field: cf.Field, Reason: cf.Reason})
	}
	var wf *webhook.FieldError
	if errors.As(err, &wf) {
		return problem.Validation(problem.FieldError{Field: wf.Field, Reason: wf.Reason})
	}
	return nil
}

func (s *Service) getUsage(c *gin.Context) {
	tenant, d := scope(c)
	if d != nil {
		fail(c, d)
		return
	}
	if tenant == nil {
		fail(c, problem.Validation(problem.FieldError{Field: "tenant_id", Reason: "is required for platform roles"}))
		return
	}
	from, to, d := s.timeRange(c)
	if d != nil {
		fail(c, d)
		return
	}
	rows, err := s.reports.TenantUsage(c.Request.Context(), *tenant, from, to, c.DefaultQuery("granularity", "day"))
	if d := fieldProblem(err); d != nil {
		fail(c, d)
		return
	}
	if err != nil {
		internal(c, s.log, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"tenant_id": tenant, "from": from, "to": to, "rows": rows})
}

func (s *Service) listInvoices(c *gin.Context) {
	tenant, limit, d := scopeAndLimit(c)
	if d != nil {
		fail(c, d)
		return
	}
	after, d := cursorParam(c)
	if d != nil {
		fail(c, d)
		return
	}
	invs, err := s.invoices.List(c.Request.Context(), tenant, limit, after)
	writePage(c, s.log, invs, err, limit, func(i invoice.Invoice) invoice.Cursor {
		p, _ := invoice.ParsePeriod(i.Period)
		return invoice.Cursor{Period: p, Tenant: i.TenantID}
	})
}

// cursorParam reads the optional cursor of a paged list.
func cursorParam(c *gin.Context) (*invoice.Cursor, *problem.Details) {
	v := c.Query("cursor")
	if v == "" {
		return nil, nil
	}
	cur, err := invoice.ParseCursor(v)
	if err != nil {
		return nil, problem.Validation(problem.FieldError{Field: "cursor", Reason: err.Error()})
	}
	return cur, nil
}

// writePage answers a paged list: {"items": [...], "next_cursor": "..."} where a full page
// (limit items; 0: 1000) names where the next one starts.
func writePage[T any](c *gin.Context, log *slog.Logger, items []T, err error, limit int, at func(T) invoice.Cursor) {
	if err != nil {
		internal(c, log, err)
		return
	}
	if items == nil {
		items = []T{}
	}
	if limit == 0 {
		limit = 1000
	}
	out := gin.H{"items": items}
	if len(items) == limit {
		out["next_cursor"] = at(items[len(items)-1]).String()
	}
	c.JSON(http.StatusOK, out)
}

// scopeAndLimit reads a list's tenant scope and its optional limit, 1..1000 (0: absent).
func scopeAndLimit(c *gin.Context) (*uuid.UUID, int, *problem.Details) {
	tenant, d := scope(c)
	if d != nil {
		return nil, 0, d
	}
	v := c.Query("limit")
	if v == "" {
		return tenant, 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 1000 {
		return nil, 0, problem.Validation(problem.FieldError{Field: "limit", Reason: "must be 1..1000"})
	}
	return tenant, n, nil
}

// listPeriods lists months with usage or an invoice, open or closed: what finance still has to
// close, and what is final.
func (s *Service) listPeriods(c *gin.Context) {
	tenant, limit, d := scopeAndLimit(c)
	if d != nil {
		fail(c, d)
		return
	}
	status := c.Query("status")
	if status != "" && status != "open" && status != "closed" {
		fail(c, problem.Validation(problem.FieldError{Field: "status", Reason: fmt.Sprintf("%q is neither open nor closed", status)}))
		return
	}
	after, d := cursorParam(c)
	if d != nil {
		fail(c, d)
		return
	}
	ps, err := s.invoices.Periods(c.Request.Context(), invoice.PeriodFilter{Tenant: tenant, Status: status, Limit: limit, After: after})
	writePage(c, s.log, ps, err, limit, func(p invoice.Period) invoice.Cursor {
		m, _ := invoice.ParsePeriod(p.Period)
		return invoice.Cursor{Period: m, Tenant: p.TenantID}
	})
}

// writeItems answers a list: {"items": [...]} (never null), or the error.
func writeItems[T any](c *gin.Context, log *slog.Logger, items []T, err error) {
	if err != nil {
		internal(c, log, err)
		return
	}
	if items == nil {
		items = []T{}
	}
	c.JSON(http.StatusOK, gin.H{"items": items})
}

func (s *Service) getInvoice(c *gin.Context) {
	tenant, d := scope(c)
	if d != nil {
		fail(c, d)
		return
	}
	asCSV, d := wantCSV(c)
	if d != nil {
		fail(c, d)
		return
	}
	id, err := uuid.Parse(c.Param("id"))
	if err != nil {
		fail(c, problem.Validation(problem.FieldError{Field: "id", Reason: "is not a uuid"}))
		return
	}
	inv, err := s.invoices.Get(c.Request.Context(), id, tenant)
	if errors.Is(err, invoice.ErrNotFound) {
		fail(c, problem.New(http.StatusNotFound, "not-found", "Invoice not found", ""))
		return
	}
	if err != nil {
		internal(c, s.log, err)
		return
	}
	if asCSV {
		s.writeCSV(c, fmt.Sprintf("invoice_%s_%s.csv", inv.Period, inv.ID), func(w io.Writer) error { return invoice.WriteCSV(w, inv) })
		return
	}
	c.JSON(http.StatusOK, inv)
}

func (s *Service) listPrices(c *gin.Context) {
	ps, err := s.prices.List(c.Request.Context())
	writeItems(c, s.log, ps, err)
}

type priceRequest struct {
	Kind            string    `json:"kind"`
	GPUModel        string    `json:"gpu_model"`
	Tier            string    `json:"tier"`
	InstanceType    string    `json:"instance_type"`
	UnitPriceMicros *int64    `json:"unit_price_micros"`
	Currency        string    `json:"currency"`
	EffectiveFrom   time.Time `json:"effective_from"`
}

func (s *Service) addPrice(c *gin.Context) {
	var req priceRequest
	if d := decodeStrict(c, &req); d != nil {
		fail(c, d)
		return
	}
	if req.UnitPriceMicros == nil {
		fail(c, problem.Validation(problem.FieldError{Field: "unit_price_micros", Reason: "is required"}))
		return
	}
	p, err := s.prices.Add(c.Request.Context(), rating.Price{Kind: req.Kind, GPUModel: req.GPUModel, Tier: req.Tier,
		InstanceType: req.InstanceType, UnitPriceMicros: *req.UnitPriceMicros, Currency: req.Currency, EffectiveFrom: req.EffectiveFrom})
	if d := fieldProblem(err); d != nil {
		fail(c, d)
		return
	}
	if errors.Is(err, rating.ErrPriceExists) {
		fail(c, problem.New(http.StatusConflict, "price-exists", "Price exists", err.Error()))
		return
	}
	if err != nil {
		internal(c, s.log, err)
		return
	}
	s.log.InfoContext(c.Request.Context(), "price added", "by", principal(c).UserID, "kind", p.Kind,
		"gpu_model", p.GPUModel, "tier", p.Tier, "instance_type", p.InstanceType, "micros", p.UnitPriceMicros, "from", p.EffectiveFrom)
	c.JSON(http.StatusCreated, p)
}

type closeRequest struct {
	TenantID string `json:"tenant_id"`
	Period   string `json:"period"` // YYYY-MM
}

func (s *Service) closePeriod(c *gin.Context) {
	var req closeRequest
	if d := decodeStrict(c, &req); d != nil {
		fail(c, d)
		return
	}
	tenant, err := uuid.Parse(req.TenantID)
	if err != nil || tenant == uuid.Nil {
		fail(c, problem.Validation(problem.FieldError{Field: "tenant_id", Reason: "is not a tenant uuid"}))
		return
	}
	period, err := invoice.ParsePeriod(req.Period)
	if err != nil {
		fail(c, problem.Validation(problem.FieldError{Field: "period", Reason: err.Error()}))
		return
	}
	known, err := s.cp.TenantExists(c.Request.Context(), tenant)
	if err != nil {
		internal(c, s.log, err)
		return
	}
	if !known {
		fail(c, problem.New(http.StatusNotFound, "not-found", "No such tenant", fmt.Sprintf("tenant %s does not exist", tenant)))
		return
	}
	inv, err := s.invoices.Close(c.Request.Context(), tenant, period)
	var unpriced *rating.UnpricedError
	switch {
	case errors.Is(err, invoice.ErrAlreadyClosed):
		fail(c, problem.New(http.StatusConflict, "period-closed", "Period already closed",
			"its invoice is final; late usage is billed as an adjustment in the next open period"))
	case errors.Is(err, invoice.ErrNotEnded):
		fail(c, problem.New(http.StatusConflict, "period-not-ended", "Period has not ended", err.Error()))
	case errors.As(err, &unpriced):
		fail(c, problem.New(http.StatusConflict, "usage-unpriced", "Usage without a price", err.Error()))
	case err != nil:
		internal(c, s.log, err)
	default:
		s.log.InfoContext(c.Request.Context(), "period closed", "tenant", tenant, "period", inv.Period,
			"invoice", inv.ID, "total_cents", inv.TotalCents, "by", principal(c).UserID)
		c.JSON(http.StatusCreated, inv)
	}
}

func (s *Service) gpuHours(c *gin.Context) {
	from, to, d := s.timeRange(c)
	if d != nil {
		fail(c, d)
		return
	}
	q := report.Query{From: from, To: to, GroupBy: c.DefaultQuery("group_by", "tier"), Granularity: c.DefaultQuery("granularity", "day")}
	asCSV, d := wantCSV(c)
	if d != nil {
		fail(c, d)
		return
	}
	rep, err := s.reports.GPUHours(c.Request.Context(), q)
	if d := fieldProblem(err); d != nil {
		fail(c, d)
		return
	}
	if err != nil {
		internal(c, s.log, err)
		return
	}
	if asCSV {
		name := fmt.Sprintf("gpu-hours_%s_%s_%s_%s.csv", q.GroupBy, q.Granularity, from.Format("20060102T15"), to.Format("20060102T15"))
		s.writeCSV(c, name, func(w io.Writer) error { return report.WriteCSV(w, rep) })
		return
	}
	c.JSON(http.StatusOK, rep)
}

// wantCSV reads the format parameter, or else an Accept naming text/csv.
func wantCSV(c *gin.Context) (bool, *problem.Details) {
	format := c.Query("format")
	if format == "" && strings.Contains(c.GetHeader("Accept"), "text/csv") {
		format = "csv"
	}
	if format != "" && format != "csv" && format != "json" {
		return false, problem.Validation(problem.FieldError{Field: "format", Reason: fmt.Sprintf("%q is neither json nor csv", format)})
	}
	return format == "csv", nil
}

// writeCSV answers a CSV download named name.
func (s *Service) writeCSV(c *gin.Context, name string, write func(io.Writer) error) {
	c.Header("Content-Type", "text/csv; charset=utf-8")
	c.Header("Content-Disposition", `attachment; filename="`+name+`"`)
	c.Status(http.StatusOK)
	if err := write(c.Writer); err != nil {
		s.log.WarnContext(c.Request.Context(), "csv write failed", "path", c.Request.URL.Path, "err", err)
	}
}
