package server

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"gpucloud/internal/problem"
	"gpucloud/internal/validate"
)

const maxBody = 1 << 20

// decodeJSON reads one JSON object into v, strictly: unknown fields, wrong types, trailing data,
// bytes that are not UTF-8, NUL bytes in strings, numbers past their column's range and missing
// required fields are 400s that name what was wrong (validate.JSONObject, validate.Decoded).
func decodeJSON(body []byte, v any) error {
	if fe := validate.JSONObject(body); fe != nil {
		return invalid(fe.Field, fe.Reason)
	}
	if err := decodeStrict(body, v); err != nil {
		return err
	}
	if fe := validate.Decoded(v); fe != nil {
		return invalid(fe.Field, fe.Reason)
	}
	return nil
}

func decodeStrict(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("trailing data after the JSON object")
	}
	if err == nil {
		return nil
	}
	var (
		syn *json.SyntaxError
		typ *json.UnmarshalTypeError
	)
	switch {
	case errors.Is(err, io.EOF):
		return problem.New(http.StatusBadRequest, "malformed-json", "Malformed JSON", "the request body is empty")
	case errors.As(err, &syn):
		return problem.New(http.StatusBadRequest, "malformed-json", "Malformed JSON", fmt.Sprintf("at byte %d: %v", syn.Offset, syn))
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "body"
		}
		return invalid(field, fmt.Sprintf("must be %s, not %s", typ.Type, typ.Value))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return invalid(strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`), "unknown field")
	}
	return problem.New(http.StatusBadRequest, "malformed-json", "Malformed JSON", err.Error())
}

// textQuery refuses query parameters that PostgreSQL would refuse or store changed (NUL bytes,
// bytes that are not UTF-8), naming the parameter, for every route billing's included.
func (s *Server) textQuery(c *gin.Context) {
	for name, vals := range c.Request.URL.Query() {
		for _, v := range append(vals, name) {
			if !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0 {
				s.fail(c, invalid(name, "query parameter holds a NUL byte or bytes that are not UTF-8"))
				return
			}
		}
	}
}

// bind reads the request body (bounded) into v.
func bind(c *gin.Context, v any) error {
	body, err := readBody(c)
	if err != nil {
		return err
	}
	return decodeJSON(body, v)
}

// readBody returns the body, cached so the idempotency layer and the handler read it once.
func readBody(c *gin.Context) ([]byte, error) {
	if b, ok := c.Get("body"); ok {
		return b.([]byte), nil
	}
	body, err := io.ReadAll(io.LimitReader(c.Request.Body, maxBody+1))
	if err != nil {
		return nil, problem.New(http.StatusBadRequest, "bad-body", "Unreadable body", err.Error())
	}
	if len(body) > maxBody {
		return nil, problem.New(http.StatusRequestEntityTooLarge, "body-too-large", "Body too large", fmt.Sprintf("limit is %d bytes", maxBody))
	}
	c.Set("body", body)
	// Handlers mounted from other parts (billing) read the request body themselves: give them
	// the bytes again, or an Idempotency-Key request reaches them with an empty body.
	c.Request.Body = io.NopCloser(bytes.NewReader(body))
	return body, nil
}

// fields collects validation failures so one 400 names every bad field.
type fields []problem.FieldError

func (f *fields) check(ok bool, field, reason string) {
	if !ok {
		*f = append(*f, problem.FieldError{Field: field, Reason: reason})
	}
}

// label checks free text shown to people (validate.Label), naming field.
func (f *fields) label(field, s string, min, max int) {
	if len(s) < min {
		f.check(false, field, fmt.Sprintf("at least %d characters", min))
		return
	}
	if err := validate.Label(s, max); err != nil {
		f.check(false, field, err.Error())
	}
}

func (f fields) err() error {
	if len(f) == 0 {
		return nil
	}
	return problem.Validation(f...)
}

func pathID(c *gin.Context, name string) (uuid.UUID, error) {
	id, err := uuid.Parse(c.Param(name))
	if err != nil {
		// Not a well-formed id: nothing by that id exists.
		return uuid.Nil, notFound(fmt.Sprintf("%s %q is not a known id", name, c.Param(name)))
	}
	return id, nil
}

// Page is a page of a list; NextCursor is empty on the last page.
type Page[T any] struct {
	Items      []T    `json:"items"`
	NextCursor string `json:"next_cursor,omitempty"`
}

// pageArgs reads ?limit= (1-200, default 50) and ?cursor= (opaque, from a previous page).
func pageArgs(c *gin.Context) (after uuid.UUID, limit int, err error) {
	if limit, err = limitArg(c); err != nil {
		return after, 0, err
	}
	if cur := c.Query("cursor"); cur != "" {
		raw, err := base64.RawURLEncoding.DecodeString(cur)
		if err == nil {
			after, err = uuid.FromBytes(raw)
		}
		if err != nil {
			return after, 0, invalid("cursor", "not a cursor from a previous page")
		}
	}
	return after, limit, nil
}

// page builds a page; id gives an item's id, the cursor of the next page.
func page[T any](items []T, limit int, id func(T) uuid.UUID) Page[T] {
	p := Page[T]{Items: items}
	if p.Items == nil {
		p.Items = []T{}
	}
	if limit > 0 && len(items) == limit { // limit 0: the whole list, never a next page
		last := id(items[len(items)-1])
		p.NextCursor = base64.RawURLEncoding.EncodeToString(last[:])
	}
	return p
}

func limitArg(c *gin.Context) (int, error) {
	l := c.Query("limit")
	if l == "" {
		return 50, nil
	}
	n, err := strconv.Atoi(l)
	if err != nil || n < 1 || n > 200 {
		return 0, invalid("limit", "must be an integer from 1 to 200")
	}
	return n, nil
}
