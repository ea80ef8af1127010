package httpapi

import (
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"gpucloud/billing/report"
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
