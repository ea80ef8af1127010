package cli

import (
	"context"
	"fmt"
	"io"
	"iter"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"gpucloud/sdk"
)

// Billing's commands: usage, invoices, periods (this file) and the price book (cmd_prices.go).

func (a *app) usageCmd() *cobra.Command {
	var from, to string
	var q sdk.UsageQuery
	cmd := &cobra.Command{Use: "usage", Short: "A tenant's usage per day or month (tenants: their own)", Args: exactArgs(0, "no arguments"),
		RunE: a.with(func(cmd *cobra.Command, cl *sdk.Client, _ []string) error {
			var err error
			if q.From, q.To, err = parseRange(from, to); err != nil {
				return err
			}
			if q.Granularity != "day" && q.Granularity != "month" {
				return usagef(fmt.Errorf("--granularity %q: want day or month", q.Granularity))
			}
			if err := checkUUID("tenant", q.TenantID, true); err != nil {
				return err
			}
			u, err := cl.Usage(cmd.Context(), q)
			if err != nil {
				return err
			}
			if a.output != "table" {
				return encode(a.io.Out, a.output, u)
			}
			return printList(a.io.Out, a.output, u.Rows, []column[sdk.UsageRow]{
				col("BUCKET", func(r sdk.UsageRow) string { return r.Bucket }), col("KIND", func(r sdk.UsageRow) string { return r.Kind }),
				col("TIER", func(r sdk.UsageRow) string { return dash(r.Tier) }),
				col("GPU MODEL/TYPE", func(r sdk.UsageRow) string { return first(r.GPUModel, r.InstanceType, "-") }),
				col("GPU HOURS", func(r sdk.UsageRow) string { return r.GPUHours }), col("VM HOURS", func(r sdk.UsageRow) string { return r.VMHours }),
				col("RECORDS", func(r sdk.UsageRow) string { return itoa(r.Records) })})
		})}
	f := cmd.Flags()
	f.StringVar(&q.TenantID, "tenant", "", "the tenant (required for operator and finance; tenants: their own)")
	f.StringVar(&from, "from", "", "start, RFC 3339, YYYY-MM-DD or YYYY-MM (default: start of this month)")
	f.StringVar(&to, "to", "", "end, exclusive, same forms (default: start of next month)")
	f.StringVar(&q.Granularity, "granularity", "day", "day or month")
	return cmd
}

var invoiceCols = []column[sdk.Invoice]{
	col("ID", func(i sdk.Invoice) string { return i.ID }), col("TENANT", func(i sdk.Invoice) string { return i.TenantID }),
	col("PERIOD", func(i sdk.Invoice) string { return i.Period }), col("STATUS", func(i sdk.Invoice) string { return i.Status }),
	col("TOTAL", func(i sdk.Invoice) string { return i.Total + " " + i.Currency }),
	col("CLOSED", func(i sdk.Invoice) string { return i.ClosedAt.Format(time.RFC3339) }),
}

func (a *app) invoicesCmd() *cobra.Command {
	c := &cobra.Command{Use: "invoices", Aliases: []string{"invoice"}, Short: "Invoices of closed months (tenants: their own)"}
	var o sdk.InvoiceListOptions
	list := &cobra.Command{Use: "list", Short: "List invoices, newest month first", Args: exactArgs(0, "no arguments"),
		RunE: a.with(func(cmd *cobra.Command, cl *sdk.Client, _ []string) error {
			if err := checkInvoiceList(o); err != nil {
				return err
			}
			p, err := cl.ListInvoices(cmd.Context(), o)
			if err != nil {
				return err
			}
			return printList(a.io.Out, a.output, p.Items, invoiceCols)
		})}
	list.Flags().StringVar(&o.TenantID, "tenant", "", "only this tenant's (operator, finance)")
	list.Flags().IntVar(&o.Limit, "limit", 0, fmt.Sprintf("at most this many, 1..%d (default: all, up to %d)", sdk.MaxInvoices, sdk.MaxInvoices))
	var format string
	get := &cobra.Command{Use: "get INVOICE_ID", Short: "Show an invoice with its lines", Args: exactArgs(1, "an invoice id"),
		RunE: a.with(func(cmd *cobra.Command, cl *sdk.Client, args []string) error {
			if err := checkUUID("invoice id", args[0], false); err != nil {
				return err
			}
			if format != "" && format != "csv" {
				return usagef(fmt.Errorf("--format %q: only csv (or -o table|json|yaml)", format))
			}
			if err := checkCSV(format, a.output); err != nil {
				return err
			}
			if format == "csv" {
				raw, err := cl.GetInvoiceCSV(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				_, err = a.io.Out.Write(raw)
				return err
			}
			inv, err := cl.GetInvoice(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printInvoice(a.io.Out, a.output, inv)
		})}
	get.Flags().StringVar(&format, "format", "", "csv: the lines as the server's CSV")
	c.AddCommand(list, get)
	completeArg(c, "INVOICE_ID", completeIDs(a, collected(func(cl *sdk.Client, ctx context.Context) iter.Seq2[sdk.Invoice, error] {
		return cl.Invoices(ctx, "")
	}), func(i sdk.Invoice) string { return i.ID }, func(i sdk.Invoice) string { return i.Period + " " + i.Total + " " + i.Currency }))
	return c
}

func checkInvoiceList(o sdk.InvoiceListOptions) error {
	if o.Limit < 0 || o.Limit > sdk.MaxInvoices {
		return usagef(fmt.Errorf("--limit %d: want 1..%d", o.Limit, sdk.MaxInvoices))
	}
	return checkUUID("tenant", o.TenantID, true)
}

// printInvoice shows an invoice and, in a table, its lines under it.
func printInvoice(w io.Writer, format string, inv sdk.Invoice) error {
	if format != "table" {
		return encode(w, format, inv)
	}
	if err := printOne(w, format, inv, invoiceCols); err != nil {
		return err
	}
	fmt.Fprintln(w)
	return printList(w, format, inv.Lines, []column[sdk.InvoiceLine]{
		col("LINE", func(l sdk.InvoiceLine) string { return itoa(l.LineNo) }),
		col("DESCRIPTION", func(l sdk.InvoiceLine) string { return l.Description }),
		col("QUANTITY", func(l sdk.InvoiceLine) string { return l.Quantity + " " + l.Unit }),
		col("UNIT PRICE", func(l sdk.InvoiceLine) string { return formatMicros(l.UnitPriceMicros) }),
		col("AMOUNT", func(l sdk.InvoiceLine) string { return money(l.AmountCents, inv.Currency) })})
}

var periodCols = []column[sdk.Period]{
	col("TENANT", func(p sdk.Period) string { return p.TenantID }), col("PERIOD", func(p sdk.Period) string { return p.Period }),
	col("STATUS", func(p sdk.Period) string { return p.Status }), col("ENDED", func(p sdk.Period) string { return yesno(p.Ended) }),
	col("INVOICE", func(p sdk.Period) string { return dash(p.InvoiceID) }),
	col("TOTAL", func(p sdk.Period) string {
		if p.TotalCents == nil {
			return "-"
		}
		return cents(*p.TotalCents)
	}),
	col("CLOSED", func(p sdk.Period) string {
		if p.ClosedAt == nil {
			return "-"
		}
		return p.ClosedAt.Format(time.RFC3339)
	}),
}

func (a *app) periodsCmd() *cobra.Command {
	c := &cobra.Command{Use: "periods", Aliases: []string{"period"}, Short: "Billing months: open ones with usage, closed ones with their invoice"}
	var f sdk.PeriodFilter
	list := &cobra.Command{Use: "list", Short: "List months with usage or an invoice, newest first", Args: exactArgs(0, "no arguments"),
		RunE: a.with(func(cmd *cobra.Command, cl *sdk.Client, _ []string) error {
			if f.Status != "" && f.Status != sdk.PeriodOpen && f.Status != sdk.PeriodClosed {
				return usagef(fmt.Errorf("--status %q: want open or closed", f.Status))
			}
			if err := checkUUID("tenant", f.TenantID, true); err != nil {
				return err
			}
			ps, err := sdk.Collect(cl.Periods(cmd.Context(), f))
			if err != nil {
				return err
			}
			return printList(a.io.Out, a.output, ps, periodCols)
		})}
	list.Flags().StringVar(&f.TenantID, "tenant", "", "only this tenant's (operator, finance)")
	list.Flags().StringVar(&f.Status, "status", "", "only open or only closed months")
	closeCmd := &cobra.Command{Use: "close TENANT_ID YYYY-MM", Short: "Close a tenant's ended month into its final invoice (finance)",
		Args: exactArgs(2, "a tenant id and a month (YYYY-MM)"),
		RunE: a.with(func(cmd *cobra.Command, cl *sdk.Client, args []string) error {
			if err := checkUUID("tenant id", args[0], false); err != nil {
				return err
			}
			if _, err := time.Parse("2006-01", args[1]); err != nil {
				return usagef(fmt.Errorf("month %q: want YYYY-MM", args[1]))
			}
			inv, err := cl.ClosePeriod(cmd.Context(), args[0], args[1])
			if err != nil {
				return err
			}
			return printInvoice(a.io.Out, a.output, inv)
		})}
	closeAll := &cobra.Command{Use: "close-all YYYY-MM", Short: "Close an ended month for every tenant (finance): a durable job, followed to its end",
		Args: exactArgs(1, "a month (YYYY-MM)"),
		RunE: a.with(func(cmd *cobra.Command, cl *sdk.Client, args []string) error {
			if _, err := time.Parse("2006-01", args[0]); err != nil {
				return usagef(fmt.Errorf("month %q: want YYYY-MM", args[0]))
			}
			job, err := cl.CloseAllPeriods(cmd.Context(), args[0])
			for err == nil && job.Status == "running" {
				select {
				case <-cmd.Context().Done():
					return cmd.Context().Err()
				case <-time.After(500 * time.Millisecond):
				}
				job, err = cl.GetCloseJob(cmd.Context(), job.ID)
			}
			if err != nil {
				return err
			}
			return printOne(a.io.Out, a.output, job, closeJobCols)
		})}
	c.AddCommand(list, closeCmd, closeAll)
	return c
}

var closeJobCols = []column[sdk.CloseJob]{
	col("JOB", func(j sdk.CloseJob) string { return j.ID }), col("PERIOD", func(j sdk.CloseJob) string { return j.Period }),
	col("STATUS", func(j sdk.CloseJob) string { return j.Status }), col("CLOSED", func(j sdk.CloseJob) string { return itoa(j.Closed) }),
	col("SKIPPED", func(j sdk.CloseJob) string { return itoa(j.Skipped) }), col("FAILED", func(j sdk.CloseJob) string { return itoa(j.Failed) }),
	col("LAST ERROR", func(j sdk.CloseJob) string { return dash(j.LastError) }),
}

// checkUUID refuses a malformed id before any request (the API would say not found or invalid,
// after a round trip and with less to go on).
func checkUUID(what, v string, optional bool) error {
	if v == "" && optional {
		return nil
	}
	if _, err := uuid.Parse(v); err != nil {
		return usagef(fmt.Errorf("%s %q is not a uuid", what, v))
	}
	return nil
}
