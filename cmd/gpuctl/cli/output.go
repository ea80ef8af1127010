package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"gopkg.in/yaml.v3"
)

// column is one table column of T.
type column[T any] struct {
	head string
	get  func(T) string
}

func col[T any](head string, get func(T) string) column[T] { return column[T]{head, get} }

// printList writes items in the chosen format: a table, a JSON array, or a YAML list.
func printList[T any](w io.Writer, format string, items []T, cols []column[T]) error {
	if items == nil {
		items = []T{}
	}
	switch format {
	case "json", "yaml":
		return encode(w, format, items)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	heads := make([]string, len(cols))
	for i, c := range cols {
		heads[i] = c.head
	}
	fmt.Fprintln(tw, strings.Join(heads, "\t"))
	for _, it := range items {
		cells := make([]string, len(cols))
		for i, c := range cols {
			cells[i] = c.get(it)
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

// printOne writes one item: as a one-row table, or JSON/YAML of the whole object.
func printOne[T any](w io.Writer, format string, item T, cols []column[T]) error {
	switch format {
	case "json", "yaml":
		return encode(w, format, item)
	}
	return printList(w, format, []T{item}, cols)
}

// encode writes v as JSON, or as YAML with the same keys as the JSON (the API's names).
func encode(w io.Writer, format string, v any) error {
	raw, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode output: %w", err)
	}
	if format == "json" {
		_, err = fmt.Fprintf(w, "%s\n", raw)
		return err
	}
	var generic any
	if err := json.Unmarshal(raw, &generic); err != nil {
		return fmt.Errorf("encode output: %w", err)
	}
	out, err := yaml.Marshal(generic)
	if err != nil {
		return fmt.Errorf("encode output: %w", err)
	}
	_, err = w.Write(out)
	return err
}

func checkFormat(f string) error {
	switch f {
	case "table", "json", "yaml":
		return nil
	}
	return usagef(fmt.Errorf("-o %q: must be table, json or yaml", f))
}

func itoa[N ~int | ~int64](n N) string { return fmt.Sprint(n) }

func yesno(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func ago(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return time.Since(*t).Round(time.Second).String() + " ago"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// gib shows bytes in GiB.
func gib(b int64) string { return fmt.Sprintf("%.1fGiB", float64(b)/(1<<30)) }

// money shows minor units (cents) with the currency.
func money(minor int64, currency string) string { return cents(minor) + " " + currency }

// cents shows minor units as a decimal; credits (negative amounts) keep one sign.
func cents(minor int64) string {
	sign := ""
	if minor < 0 {
		sign, minor = "-", -minor
	}
	return fmt.Sprintf("%s%d.%02d", sign, minor/100, minor%100)
}
