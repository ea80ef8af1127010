package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"gpucloud/sdk"
)

func (a *app) reportCmd() *cobra.Command {
	c := &cobra.Command{Use: "report", Short: "Finance reports (served by billing)"}
	var from, to, format string
	var q sdk.GPUHoursQuery
	hours := &cobra.Command{Use: "gpu-hours", Short: "GPU-hours and revenue by tier, GPU model or tenant", Args: exactArgs(0, "no arguments"),
		RunE: a.with(func(cmd *cobra.Command, cl *sdk.Client, _ []string) error {
			var err error
			if q.From, q.To, err = parseRange(from, to); err != nil {
				return err
			}
			if err := checkCSV(format, a.output); err != nil {
				return err
			}
			if format == "csv" {
				raw, err := cl.GPUHoursCSV(cmd.Context(), q)
				if err != nil {
					return err
				}
				_, err = a.io.Out.Write(raw)
				return err
			}
			if format != "" {
				return usagef(fmt.Errorf("--format %q: only csv (or -o table|json|yaml)", format))
			}
			r, err := cl.GPUHours(cmd.Context(), q)
			if err != nil {
				return err
			}
			if a.output != "table" {
				return encode(a.io.Out, a.output, r)
			}
			rows := append(r.Rows, r.Total)
			rows[len(rows)-1].Bucket, rows[len(rows)-1].Group = "TOTAL", ""
			return printList(a.io.Out, a.output, rows, []column[sdk.ReportRow]{
				col("BUCKET", func(r sdk.ReportRow) string { return r.Bucket }), col(r.GroupBy, func(r sdk.ReportRow) string { return r.Group }),
				col("GPU HOURS", func(r sdk.ReportRow) string { return r.GPUHours }),
				col("REVENUE", func(x sdk.ReportRow) string { return x.Revenue + " " + r.Currency }),
				col("RECORDS", func(r sdk.ReportRow) string { return itoa(r.Records) })})
		})}
	f := hours.Flags()
	f.StringVar(&from, "from", "", "start, RFC 3339, YYYY-MM-DD or YYYY-MM (default: start of this month)")
	f.StringVar(&to, "to", "", "end, exclusive, same forms (default: start of next month)")
	f.StringVar(&q.GroupBy, "group-by", "tier", "tier, gpu_model or tenant")
	f.StringVar(&q.Granularity, "granularity", "day", "day or month")
	f.StringVar(&format, "format", "", "csv: the server's CSV as is")
	c.AddCommand(hours)
	return c
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
