package invoice

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"

	"gpucloud/billing/rating"
	"gpucloud/billing/report"
)

// WriteCSV writes an invoice's lines, one row each, every row naming its invoice, tenant and
// period so files of several invoices concatenate into one table. No total row: spreadsheets
// sum, and the invoice's total is the sum of these amounts by construction.
func WriteCSV(w io.Writer, inv Invoice) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"invoice_id", "tenant_id", "period", "line_no", "description", "kind", "tier", "gpu_model",
		"instance_type", "usage_period", "adjustment", "quantity", "unit", "unit_price_micros", "amount_cents", "amount_" + inv.Currency})
	for _, l := range inv.Lines {
		_ = cw.Write([]string{inv.ID.String(), inv.TenantID.String(), inv.Period, strconv.Itoa(l.LineNo), report.Cell(l.Description),
			l.Kind, l.Tier, report.Cell(l.GPUModel), report.Cell(l.InstanceType), l.UsagePeriod, strconv.FormatBool(l.Adjustment),
			l.Quantity, l.Unit, strconv.FormatInt(l.UnitPriceMicros, 10), strconv.FormatInt(l.AmountCents, 10), rating.FormatCents(l.AmountCents)})
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("invoice: write csv: %w", err)
	}
	return nil
}
