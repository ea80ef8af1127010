package httpapi

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"gpucloud/billing/invoice"
	"gpucloud/billing/report"
	"gpucloud/internal/problem"
)

// heldReport answers finance's month-close report: held GPU-hours, utilised GPU-hours, VM-hours,
// storage GiB-hours and revenue per group_by (a comma-separated list of tier, gpu_model, tenant,
// instance_type), JSON or CSV.
func (s *Service) heldReport(c *gin.Context) {
	from, to, d := s.timeRange(c)
	if d != nil {
		fail(c, d)
		return
	}
	asCSV, d := wantCSV(c)
	if d != nil {
		fail(c, d)
		return
	}
	var groupBy []string
	if v := c.DefaultQuery("group_by", "tenant"); v != "" {
		groupBy = strings.Split(v, ",")
	}
	rep, err := s.reports.Held(c.Request.Context(), report.HeldQuery{From: from, To: to, GroupBy: groupBy}, s.now())
	if err != nil || !asCSV {
		s.answer(c, http.StatusOK, rep, err)
		return
	}
	name := fmt.Sprintf("billing_%s_%s_%s.csv", strings.Join(groupBy, "-"), from.Format("20060102T15"), to.Format("20060102T15"))
	s.writeCSV(c, name, func(w io.Writer) error { return report.WriteHeldCSV(w, rep) })
}

type closeAllRequest struct {
	Period string `json:"period"` // YYYY-MM
}

// closeAll starts (or finds) the durable job closing a month for every tenant (finance); the
// apiserver's job runner works it, and any replica takes it over if this one dies.
func (s *Service) closeAll(c *gin.Context) {
	var req closeAllRequest
	if d := decodeStrict(c, &req); d != nil {
		fail(c, d)
		return
	}
	period, err := invoice.ParsePeriod(req.Period)
	if err != nil {
		fail(c, problem.Validation(problem.FieldError{Field: "period", Reason: err.Error()}))
		return
	}
	job, err := s.invoices.StartCloseAll(c.Request.Context(), period)
	if errors.Is(err, invoice.ErrNotEnded) {
		fail(c, problem.New(http.StatusConflict, "period-not-ended", "Period has not ended", err.Error()))
		return
	}
	s.answer(c, http.StatusAccepted, job, err)
}

func (s *Service) getCloseJob(c *gin.Context) {
	id, err := uuid.Parse(c.Param("id"))
	if err != nil {
		fail(c, problem.Validation(problem.FieldError{Field: "id", Reason: "is not a uuid"}))
		return
	}
	job, err := s.invoices.GetJob(c.Request.Context(), id)
	if errors.Is(err, invoice.ErrJobNotFound) {
		fail(c, problem.New(http.StatusNotFound, "not-found", "Close job not found", ""))
		return
	}
	s.answer(c, http.StatusOK, job, err)
}
