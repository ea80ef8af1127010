package report

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// WriteCSV writes the report's rows (and no total: spreadsheets sum) with a header naming the
// grouping column.
func WriteCSV(w io.Writer, rep Report) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"bucket", rep.GroupBy, "gpu_ms", "gpu_hours", "records", "revenue_cents", "revenue_" + rep.Currency, "unpriced_gpu_ms"})
	for _, r := range rep.Rows {
		_ = cw.Write([]string{r.Bucket, Cell(r.Group), strconv.FormatInt(r.GPUMs, 10), r.GPUHours,
			strconv.FormatInt(r.Records, 10), strconv.FormatInt(r.RevenueCents, 10), r.Revenue,
			strconv.FormatInt(r.UnpricedGPUMs, 10)})
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("report: write csv: %w", err)
	}
	return nil
}

// Cell defuses values a spreadsheet would run as a formula (a GPU model is daemon-supplied text).
func Cell(s string) string {
	if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return "'" + s
	}
	return s
}
