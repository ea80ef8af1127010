package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"gpucloud/sdk"
)

// Prepaid credit, budgets and webhooks.

func (a *app) balanceCmd() *cobra.Command {
	var tenant string
	cmd := &cobra.Command{Use: "balance", Short: "Running balance: prepaid credit left minus what was held and not yet invoiced (tenants: their own)",
		Args: exactArgs(0, "no arguments"),
		RunE: a.with(func(cmd *cobra.Command, cl *sdk.Client, _ []string) error {
			if err := checkUUID("tenant", tenant, true); err != nil {
				return err
			}
			b, err := cl.GetBalance(cmd.Context(), tenant)
			if err != nil {
				return err
			}
			if a.output != "table" {
				return encode(a.io.Out, a.output, b)
			}
			budget := "-"
			if b.Budget != nil {
				budget = fmt.Sprintf("%s/month, alerts at %v%%, hard stop %s", cents(b.Budget.LimitCents), b.Budget.Thresholds, b.Budget.HardStop)
			}
			return printOne(a.io.Out, a.output, b.Balance, []column[sdk.Balance]{
				col("TENANT", func(x sdk.Balance) string { return x.TenantID }),
				col("CREDIT", func(x sdk.Balance) string { return money(x.CreditCents, x.Currency) }),
				col("UNBILLED", func(x sdk.Balance) string { return money(x.UnbilledCents, x.Currency) }),
				col("MONTH TO DATE", func(x sdk.Balance) string { return money(x.MonthToDateCents, x.Currency) }),
				col("BALANCE", func(x sdk.Balance) string { return money(x.BalanceCents, x.Currency) }),
				col("BUDGET", func(sdk.Balance) string { return budget }),
				col("UNPRICED", func(x sdk.Balance) string { return dash(strings.Join(x.Unpriced, "; ")) })})
		})}
	cmd.Flags().StringVar(&tenant, "tenant", "", "the tenant (required for operator and finance; tenants: their own)")
	return cmd
}

var grantCols = []column[sdk.CreditGrant]{
	col("ID", func(g sdk.CreditGrant) string { return g.ID }), col("TENANT", func(g sdk.CreditGrant) string { return g.TenantID }),
	col("AMOUNT", func(g sdk.CreditGrant) string { return cents(g.AmountCents) }),
	col("REMAINING", func(g sdk.CreditGrant) string { return cents(g.RemainingCents) }),
	col("PRIORITY", func(g sdk.CreditGrant) string { return itoa(g.Priority) }),
	col("EXPIRES", func(g sdk.CreditGrant) string {
		if g.ExpiresAt == nil {
			return "-"
		}
		return g.ExpiresAt.Format(time.RFC3339)
	}),
	col("NOTE", func(g sdk.CreditGrant) string { return dash(g.Note) }),
}

func (a *app) creditsCmd() *cobra.Command {
	c := &cobra.Command{Use: "credits", Aliases: []string{"credit"}, Short: "Prepaid credit grants, drawn at period close by priority then expiry"}
	var tenant string
	list := &cobra.Command{Use: "list", Short: "List grants in draw order (tenants: their own)", Args: exactArgs(0, "no arguments"),
		RunE: a.with(func(cmd *cobra.Command, cl *sdk.Client, _ []string) error {
			if err := checkUUID("tenant", tenant, true); err != nil {
				return err
			}
			p, err := cl.ListCredits(cmd.Context(), tenant)
			if err != nil {
				return err
			}
			return printList(a.io.Out, a.output, p.Items, grantCols)
		})}
	list.Flags().StringVar(&tenant, "tenant", "", "only this tenant's (operator, finance)")
	var req sdk.AddCreditRequest
	var amount, expires string
	var prio int
	grant := &cobra.Command{Use: "grant TENANT_ID", Short: "Grant prepaid credit (finance)", Args: exactArgs(1, "a tenant id"),
		RunE: a.with(func(cmd *cobra.Command, cl *sdk.Client, args []string) error {
			if err := checkUUID("tenant id", args[0], false); err != nil {
				return err
			}
			m, err := parseMicros(amount)
			if err != nil || m <= 0 || m%10_000 != 0 {
				return usagef(fmt.Errorf("--amount %q: want a positive amount in whole cents (25.00)", amount))
			}
			req.TenantID, req.AmountCents = args[0], m/10_000
			if cmd.Flags().Changed("priority") {
				req.Priority = &prio
			}
			if expires != "" {
				t, err := time.Parse(time.RFC3339, expires)
				if err != nil {
					return usagef(fmt.Errorf("--expires %q: want RFC 3339", expires))
				}
				req.ExpiresAt = &t
			}
			g, err := cl.AddCredit(cmd.Context(), req)
			if err != nil {
				return err
			}
			return printOne(a.io.Out, a.output, g, grantCols)
		})}
	f := grant.Flags()
	f.StringVar(&amount, "amount", "", "amount in currency units (25.00)")
	f.IntVar(&prio, "priority", 100, "draw order: lower first (0..1000)")
	f.StringVar(&expires, "expires", "", "expiry, RFC 3339 (default: never)")
	f.StringVar(&req.Note, "note", "", "a note for finance")
	_ = grant.MarkFlagRequired("amount")
	c.AddCommand(list, grant)
	return c
}

var budgetCols = []column[sdk.Budget]{
	col("TENANT", func(b sdk.Budget) string { return b.TenantID }), col("LIMIT", func(b sdk.Budget) string { return cents(b.LimitCents) }),
	col("THRESHOLDS", func(b sdk.Budget) string { return fmt.Sprint(b.Thresholds) }),
	col("HARD STOP", func(b sdk.Budget) string { return b.HardStop }),
}

func (a *app) budgetCmd() *cobra.Command {
	c := &cobra.Command{Use: "budget", Short: "The monthly budget: alerts at thresholds, hard stop when credit is exhausted"}
	var tenant string
	get := &cobra.Command{Use: "get", Short: "Show the budget", Args: exactArgs(0, "no arguments"),
		RunE: a.with(func(cmd *cobra.Command, cl *sdk.Client, _ []string) error {
			if err := checkUUID("tenant", tenant, true); err != nil {
				return err
			}
			b, err := cl.GetBudget(cmd.Context(), tenant)
			if err != nil {
				return err
			}
			return printOne(a.io.Out, a.output, b, budgetCols)
		})}
	var limit, thresholds string
	var req sdk.SetBudgetRequest
	set := &cobra.Command{Use: "set", Short: "Set the budget (tenant admin: own; finance: --tenant)", Args: exactArgs(0, "no arguments"),
		RunE: a.with(func(cmd *cobra.Command, cl *sdk.Client, _ []string) error {
			if err := checkUUID("tenant", tenant, true); err != nil {
				return err
			}
			m, err := parseMicros(limit)
			if err != nil || m <= 0 || m%10_000 != 0 {
				return usagef(fmt.Errorf("--limit %q: want a positive amount in whole cents (500.00)", limit))
			}
			req.LimitCents = m / 10_000
			req.Thresholds = nil
			for _, v := range strings.Split(thresholds, ",") {
				var n int
				if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d", &n); err != nil {
					return usagef(fmt.Errorf("--thresholds %q: want percentages like 50,80,100", thresholds))
				}
				req.Thresholds = append(req.Thresholds, n)
			}
			b, err := cl.SetBudget(cmd.Context(), tenant, req)
			if err != nil {
				return err
			}
			return printOne(a.io.Out, a.output, b, budgetCols)
		})}
	set.Flags().StringVar(&limit, "limit", "", "monthly limit in currency units (500.00)")
	set.Flags().StringVar(&thresholds, "thresholds", "50,80,100", "alert thresholds, percent of the limit, ascending")
	set.Flags().StringVar(&req.HardStop, "hard-stop", "none", "when credit is exhausted: none, block_create or stop_instances")
	_ = set.MarkFlagRequired("limit")
	for _, x := range []*cobra.Command{get, set} {
		x.Flags().StringVar(&tenant, "tenant", "", "the tenant (operator, finance)")
	}
	c.AddCommand(get, set)
	return c
}

var webhookCols = []column[sdk.Webhook]{
	col("ID", func(w sdk.Webhook) string { return w.ID }),
	col("TENANT", func(w sdk.Webhook) string {
		if w.TenantID == nil {
			return "(all)"
		}
		return *w.TenantID
	}),
	col("URL", func(w sdk.Webhook) string { return w.URL }), col("EVENTS", func(w sdk.Webhook) string { return strings.Join(w.Events, ",") }),
	col("SECRET", func(w sdk.Webhook) string { return dash(w.Secret) }),
}

func (a *app) webhooksCmd() *cobra.Command {
	c := &cobra.Command{Use: "webhooks", Aliases: []string{"webhook"}, Short: "Signed event deliveries: budget.threshold, credit.low, invoice.closed, instance.failed, instance.state"}
	var tenant string
	list := &cobra.Command{Use: "list", Short: "List endpoints (tenants: their own)", Args: exactArgs(0, "no arguments"),
		RunE: a.with(func(cmd *cobra.Command, cl *sdk.Client, _ []string) error {
			if err := checkUUID("tenant", tenant, true); err != nil {
				return err
			}
			p, err := cl.ListWebhooks(cmd.Context(), tenant)
			if err != nil {
				return err
			}
			return printList(a.io.Out, a.output, p.Items, webhookCols)
		})}
	list.Flags().StringVar(&tenant, "tenant", "", "only this tenant's (operator, finance)")
	var req sdk.CreateWebhookRequest
	var events string
	create := &cobra.Command{Use: "create URL", Short: "Register an endpoint; prints its signing secret once", Args: exactArgs(1, "the endpoint's URL"),
		RunE: a.with(func(cmd *cobra.Command, cl *sdk.Client, args []string) error {
			if err := checkUUID("tenant", req.TenantID, true); err != nil {
				return err
			}
			req.URL, req.Events = args[0], strings.Split(events, ",")
			w, err := cl.CreateWebhook(cmd.Context(), req)
			if err != nil {
				return err
			}
			return printOne(a.io.Out, a.output, w, webhookCols)
		})}
	create.Flags().StringVar(&events, "events", "budget.threshold,credit.low,invoice.closed,instance.failed", "comma-separated event types")
	create.Flags().StringVar(&req.TenantID, "tenant", "", "finance: one tenant's events (default: every tenant's)")
	del := &cobra.Command{Use: "delete WEBHOOK_ID", Short: "Stop an endpoint", Args: exactArgs(1, "a webhook id"),
		RunE: a.with(func(cmd *cobra.Command, cl *sdk.Client, args []string) error {
			if err := checkUUID("webhook id", args[0], false); err != nil {
				return err
			}
			return cl.DeleteWebhook(cmd.Context(), args[0])
		})}
	deliveries := &cobra.Command{Use: "deliveries WEBHOOK_ID", Short: "An endpoint's delivery log, newest first", Args: exactArgs(1, "a webhook id"),
		RunE: a.with(func(cmd *cobra.Command, cl *sdk.Client, args []string) error {
			if err := checkUUID("webhook id", args[0], false); err != nil {
				return err
			}
			p, err := cl.ListWebhookDeliveries(cmd.Context(), args[0], sdk.ListOptions{})
			if err != nil {
				return err
			}
			return printList(a.io.Out, a.output, p.Items, []column[sdk.WebhookDelivery]{
				col("ID", func(d sdk.WebhookDelivery) string { return itoa(d.ID) }),
				col("EVENT", func(d sdk.WebhookDelivery) string { return d.EventType }),
				col("STATUS", func(d sdk.WebhookDelivery) string { return d.Status }),
				col("ATTEMPTS", func(d sdk.WebhookDelivery) string { return itoa(d.Attempts) }),
				col("LAST", func(d sdk.WebhookDelivery) string { return itoa(d.LastStatus) + " " + d.LastError }),
				col("CREATED", func(d sdk.WebhookDelivery) string { return d.CreatedAt.Format(time.RFC3339) })})
		})}
	c.AddCommand(list, create, del, deliveries)
	return c
}
