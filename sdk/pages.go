package sdk

import (
	"context"
	"iter"
	"net/url"
	"strconv"
)

// Page is one page of a list; NextCursor is empty on the last page.
type Page[T any] struct {
	Items      []T    `json:"items"`
	NextCursor string `json:"next_cursor,omitempty"`
}

// ListOptions page through a list: Limit 1-200 (0: the server's default, 50) and the Cursor of
// the previous page's NextCursor.
type ListOptions struct {
	Limit  int
	Cursor string
}

func (o ListOptions) values() url.Values {
	v := url.Values{}
	if o.Limit > 0 {
		v.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Cursor != "" {
		v.Set("cursor", o.Cursor)
	}
	return v
}

// listPage fetches one page of op.
func listPage[T any](ctx context.Context, c *Client, o Op, q url.Values, args ...string) (Page[T], error) {
	var p Page[T]
	err := c.call(ctx, request{op: o, args: args, query: q, out: &p})
	return p, err
}

// all iterates every item, one page at a time; it stops at the first error, which it yields.
func all[T any](ctx context.Context, fetch func(ctx context.Context, cursor string) (Page[T], error)) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		cursor := ""
		for {
			p, err := fetch(ctx, cursor)
			if err != nil {
				var zero T
				yield(zero, err)
				return
			}
			for _, it := range p.Items {
				if !yield(it, nil) {
					return
				}
			}
			if p.NextCursor == "" || p.NextCursor == cursor {
				return
			}
			cursor = p.NextCursor
		}
	}
}

// Collect gathers an iterator into a slice, stopping at the first error.
func Collect[T any](seq iter.Seq2[T, error]) ([]T, error) {
	var out []T
	for v, err := range seq {
		if err != nil {
			return out, err
		}
		out = append(out, v)
	}
	return out, nil
}
