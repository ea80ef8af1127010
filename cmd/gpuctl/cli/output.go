package cli

import (
	"bytes"
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
	// Numbers stay numbers as JSON wrote them: decoded as float64, 10737418240 would print as
	// 1.073741824e+10.
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var generic any
	if err := dec.Decode(&generic); err != nil {
		return fmt.Errorf("encode output: %w", err)
	}
	out, err := yaml.Marshal(exactNumbers(generic))
	if err != nil {
		return fmt.Errorf("encode output: %w", err)
	}
	_, err = w.Write(out)
	return err
}

// exactNumbers turns the json.Numbers of a decoded document into int64 where they are integers
// and float64 otherwise, so YAML prints them as JSON did.
func exactNumbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = exactNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = exactNumbers(e)
		}
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return n
		}
		f, _ := x.Float64()
		return f
	}
	return v
}

// checkCSV refuses --format csv together with -o json|yaml: both name how to print, and
// printing CSV while -o asked for JSON would be silently doing something else.
func checkCSV(format, output string) error {
	if format == "csv" && output != "table" {
		return usagef(fmt.Errorf("--format csv and -o %s both set the output: give one of them", output))
	}
	return nil
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
