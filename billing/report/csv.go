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

// WriteHeldCSV writes the month-close report's rows, one column per grouping dimension first.
func WriteHeldCSV(w io.Writer, rep HeldReport) error {
	cw := csv.NewWriter(w)
	head := append(append([]string{}, rep.GroupBy...), "held_gpu_ms", "held_gpu_hours", "slice_mib_ms", "slice_gib_hours",
		"utilised_gpu_ms", "utilised_gpu_hours", "vm_ms", "vm_hours", "storage_mib_ms", "storage_gib_hours",
		"revenue_cents", "revenue_"+rep.Currency, "unpriced_pieces")
	_ = cw.Write(head)
	i64 := func(v int64) string { return strconv.FormatInt(v, 10) }
	for _, r := range rep.Rows {
		var rec []string
		for _, d := range rep.GroupBy {
			rec = append(rec, Cell(r.Group[d]))
		}
		_ = cw.Write(append(rec, i64(r.HeldGPUMs), r.HeldGPUHours, i64(r.SliceMiBMs), r.SliceGiBHours,
			i64(r.UtilisedGPUMs), r.UtilisedGPUHours, i64(r.VMMs), r.VMHours, i64(r.StorageMiBMs), r.StorageGiBHours,
			i64(r.RevenueCents), r.Revenue, i64(r.UnpricedPieces)))
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("report: write csv: %w", err)
	}
	return nil
}
