package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"gpucloud/sdk"
)

func (a *app) reportCmd() *cobra.Command {
	c := &cobra.Command{Use: "report", Short: "Finance reports (served by billing)"}
	c.AddCommand(a.gpuHoursCmd(), a.billingReportCmd())
	return c
}

// reportFlags are the flags every report takes.
type reportFlags struct{ from, to, format string }

func (f *reportFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.from, "from", "", "start, RFC 3339, YYYY-MM-DD or YYYY-MM (default: start of this month)")
	fl.StringVar(&f.to, "to", "", "end, exclusive, same forms (default: start of next month)")
	fl.StringVar(&f.format, "format", "", "csv: the server's CSV as is")
}

// runReport checks the flags, then prints the server's CSV (--format csv) or the report that get
// fetches, as -o says: a table of rows (table), or the whole answer.
func runReport[R any](a *app, f *reportFlags, from, to *time.Time, csv func() ([]byte, error),
	get func() (R, error), table func(R) error) error {
	var err error
	if *from, *to, err = parseRange(f.from, f.to); err != nil {
		return err
	}
	if err := checkCSV(f.format, a.output); err != nil {
		return err
	}
	if f.format == "csv" {
		raw, err := csv()
		if err != nil {
			return err
		}
		_, err = a.io.Out.Write(raw)
		return err
	}
	if f.format != "" {
		return usagef(fmt.Errorf("--format %q: only csv (or -o table|json|yaml)", f.format))
	}
	r, err := get()
	if err != nil {
		return err
	}
	if a.output != "table" {
		return encode(a.io.Out, a.output, r)
	}
	return table(r)
}

func (a *app) gpuHoursCmd() *cobra.Command {
	var f reportFlags
	var q sdk.GPUHoursQuery
	hours := &cobra.Command{Use: "gpu-hours", Short: "Utilised GPU-hours (inside CUDA sessions, not what is charged) by tier, GPU model or tenant",
		Args: exactArgs(0, "no arguments"),
		RunE: a.with(func(cmd *cobra.Command, cl *sdk.Client, _ []string) error {
			ctx := cmd.Context()
			return runReport(a, &f, &q.From, &q.To, func() ([]byte, error) { return cl.GPUHoursCSV(ctx, q) },
				func() (sdk.GPUHoursReport, error) { return cl.GPUHours(ctx, q) },
				func(r sdk.GPUHoursReport) error {
					rows := append(r.Rows, r.Total)
					rows[len(rows)-1].Bucket, rows[len(rows)-1].Group = "TOTAL", ""
					return printList(a.io.Out, a.output, rows, []column[sdk.ReportRow]{
						col("BUCKET", func(r sdk.ReportRow) string { return r.Bucket }), col(r.GroupBy, func(r sdk.ReportRow) string { return r.Group }),
						col("GPU HOURS", func(r sdk.ReportRow) string { return r.GPUHours }),
						col("UTILISATION VALUE", func(x sdk.ReportRow) string { return x.Revenue + " " + r.Currency }),
						col("RECORDS", func(r sdk.ReportRow) string { return itoa(r.Records) })})
				})
		})}
	f.add(hours)
	hours.Flags().StringVar(&q.GroupBy, "group-by", "tier", "tier, gpu_model or tenant")
	hours.Flags().StringVar(&q.Granularity, "granularity", "day", "day or month")
	return hours
}

// billingReportCmd is the month-close report: what tenants held (and are charged for) beside what
// their sessions used, and the revenue.
func (a *app) billingReportCmd() *cobra.Command {
	var f reportFlags
	var q sdk.BillingReportQuery
	var groupBy []string
	cmd := &cobra.Command{Use: "billing", Short: "Month close: held (charged) vs utilised GPU-hours, VM-hours, storage and revenue",
		Args: exactArgs(0, "no arguments"),
		RunE: a.with(func(cmd *cobra.Command, cl *sdk.Client, _ []string) error {
			ctx := cmd.Context()
			q.GroupBy = groupBy
			return runReport(a, &f, &q.From, &q.To, func() ([]byte, error) { return cl.BillingReportCSV(ctx, q) },
				func() (sdk.BillingReport, error) { return cl.BillingReport(ctx, q) },
				func(r sdk.BillingReport) error {
					rows := append(r.Rows, r.Total)
					rows[len(rows)-1].Group = map[string]string{"": "TOTAL"}
					group := func(x sdk.BillingReportRow) string {
						if g, ok := x.Group[""]; ok {
							return g // the total
						}
						var parts []string
						for _, d := range r.GroupBy {
							parts = append(parts, x.Group[d])
						}
						return strings.Join(parts, " / ")
					}
					return printList(a.io.Out, a.output, rows, []column[sdk.BillingReportRow]{
						col(strings.ToUpper(strings.Join(r.GroupBy, "/")), group),
						col("HELD GPU H", func(x sdk.BillingReportRow) string { return x.HeldGPUHours }),
						col("UTILISED GPU H", func(x sdk.BillingReportRow) string { return x.UtilisedGPUHours }),
						col("SLICE GIB H", func(x sdk.BillingReportRow) string { return x.SliceGiBHours }),
						col("VM H", func(x sdk.BillingReportRow) string { return x.VMHours }),
						col("STORAGE GIB H", func(x sdk.BillingReportRow) string { return x.StorageGiBHours }),
						col("REVENUE", func(x sdk.BillingReportRow) string { return x.Revenue + " " + r.Currency }),
						col("UNPRICED", func(x sdk.BillingReportRow) string { return itoa(x.UnpricedPieces) })})
				})
		})}
	f.add(cmd)
	cmd.Flags().StringSliceVar(&groupBy, "group-by", []string{"tenant"}, "any of tier, gpu_model, tenant, instance_type (comma-separated)")
	return cmd
}

// parseRange reads --from and --to (empty: the server's default).
func parseRange(from, to string) (time.Time, time.Time, error) {
	f, err := parseWhen("from", from)
	if err != nil {
		return f, time.Time{}, err
	}
	t, err := parseWhen("to", to)
	return f, t, err
}

func parseWhen(flag, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	for _, layout := range []string{time.RFC3339, "2006-01-02", "2006-01"} {
		if t, err := time.Parse(layout, v); err == nil {
			return t, nil
		}
	}
	return time.Time{}, usagef(fmt.Errorf("--%s %q: want RFC 3339 (2026-03-01T00:00:00Z), YYYY-MM-DD or YYYY-MM", flag, v))
}
