package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"gpucloud/sdk"
)

var priceCols = []column[sdk.Price]{
	col("ID", func(p sdk.Price) string { return p.ID }), col("KIND", func(p sdk.Price) string { return p.Kind }),
	col("GPU MODEL", func(p sdk.Price) string { return dash(p.GPUModel) }), col("TIER", func(p sdk.Price) string { return dash(p.Tier) }),
	col("INSTANCE TYPE", func(p sdk.Price) string { return dash(p.InstanceType) }),
	col("PRICE", func(p sdk.Price) string { return formatMicros(p.UnitPriceMicros) + " " + p.Currency + "/" + p.Unit }),
	col("EFFECTIVE FROM", func(p sdk.Price) string { return p.EffectiveFrom.Format(time.RFC3339) }),
}

// pricesCmd is billing's price book. (Instance types' own hourly list prices are in
// "instance-types list".)
func (a *app) pricesCmd() *cobra.Command {
	c := &cobra.Command{Use: "prices", Aliases: []string{"price"}, Short: "Billing's price book: what usage is rated at"}
	c.AddCommand(listCmd(a, "List price entries", collected((*sdk.Client).Prices), priceCols))
	var req sdk.AddPriceRequest
	var price, from string
	add := &cobra.Command{Use: "add", Short: "Add a price entry (finance); a change is a new entry with a later --effective-from",
		Args: exactArgs(0, "no arguments (flags only)"),
		RunE: a.with(func(cmd *cobra.Command, cl *sdk.Client, _ []string) error {
			if err := checkPrice(&req, price, from); err != nil {
				return err
			}
			p, err := cl.AddPrice(cmd.Context(), req)
			if err != nil {
				return err
			}
			return printOne(a.io.Out, a.output, p, priceCols)
		})}
	f := add.Flags()
	f.StringVar(&req.Kind, "kind", "", "gpu, vm or storage (per GiB-hour of disk, running or stopped)")
	f.StringVar(&req.GPUModel, "gpu-model", "", "gpu: the GPU model's name as usage reports it")
	f.StringVar(&req.Tier, "tier", "", "gpu: dedicated (per GPU-hour) or shared (per GiB-hour of memory quota)")
	f.StringVar(&req.InstanceType, "instance-type", "", "vm: the instance type's name (per VM-hour)")
	f.StringVar(&price, "unit-price", "", "price per unit-hour in currency units, up to 6 decimals (2.50)")
	f.StringVar(&req.Currency, "currency", "USD", "ISO 4217 currency")
	f.StringVar(&from, "effective-from", "", "a whole hour from which it applies: RFC 3339, YYYY-MM-DD or YYYY-MM (UTC)")
	for _, n := range []string{"kind", "unit-price", "effective-from"} {
		_ = add.MarkFlagRequired(n)
	}
	c.AddCommand(add)
	return c
}

// checkPrice fills req from the flags' text and refuses what the API would, before any request.
func checkPrice(req *sdk.AddPriceRequest, price, from string) error {
	switch req.Kind {
	case "gpu":
		if req.GPUModel == "" {
			return usagef(fmt.Errorf("--kind gpu needs --gpu-model"))
		}
		if req.Tier != "dedicated" && req.Tier != "shared" {
			return usagef(fmt.Errorf("--kind gpu needs --tier dedicated or shared, got %q", req.Tier))
		}
		if req.InstanceType != "" {
			return usagef(fmt.Errorf("--instance-type is for --kind vm"))
		}
	case "vm":
		if req.InstanceType == "" {
			return usagef(fmt.Errorf("--kind vm needs --instance-type"))
		}
		if req.GPUModel != "" || req.Tier != "" {
			return usagef(fmt.Errorf("--gpu-model and --tier are for --kind gpu"))
		}
	case "storage":
		if req.GPUModel != "" || req.Tier != "" || req.InstanceType != "" {
			return usagef(fmt.Errorf("--kind storage takes no --gpu-model, --tier or --instance-type (one price per GiB-hour)"))
		}
	default:
		return usagef(fmt.Errorf("--kind %q: want gpu, vm or storage", req.Kind))
	}
	m, err := parseMicros(price)
	if err != nil {
		return usagef(fmt.Errorf("--unit-price: %w", err))
	}
	req.UnitPriceMicros = &m
	t, err := parseWhen("effective-from", from)
	if err != nil {
		return err
	}
	if !t.Equal(t.Truncate(time.Hour)) {
		return usagef(fmt.Errorf("--effective-from %s: prices start on a whole hour", t.Format(time.RFC3339)))
	}
	req.EffectiveFrom = t
	return nil
}

// parseMicros reads a non-negative decimal of at most 6 places as millionths, exactly (no
// floating point: 0.1 + 0.2 must stay 300000).
func parseMicros(v string) (int64, error) {
	whole, frac, dot := strings.Cut(v, ".")
	if whole == "" && (!dot || frac == "") {
		return 0, fmt.Errorf("%q is not a price", v)
	}
	if len(frac) > 6 {
		return 0, fmt.Errorf("%q has more than 6 decimals", v)
	}
	digits := func(s string) bool { return !strings.ContainsFunc(s, func(r rune) bool { return r < '0' || r > '9' }) }
	if !digits(whole) || !digits(frac) || (dot && frac == "") {
		return 0, fmt.Errorf("%q is not a decimal like 2.50", v)
	}
	w, err := strconv.ParseInt(first(whole, "0"), 10, 64)
	if err != nil || w > 1<<40 {
		return 0, fmt.Errorf("%q is too large", v)
	}
	f, _ := strconv.ParseInt((frac + "000000")[:6], 10, 64)
	return w*1_000_000 + f, nil
}

// formatMicros shows millionths with at least 2 decimals and no trailing zeros beyond them.
func formatMicros(m int64) string {
	sign := ""
	if m < 0 {
		sign, m = "-", -m
	}
	s := strings.TrimRight(fmt.Sprintf("%06d", m%1_000_000), "0")
	if len(s) < 2 {
		s += strings.Repeat("0", 2-len(s))
	}
	return fmt.Sprintf("%s%d.%s", sign, m/1_000_000, s)
}
