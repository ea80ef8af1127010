// Package openapi models the OpenAPI 3 document the apiserver serves at /v1/openapi.json. The
// document is a Go value: each part of the platform contributes its path items and the server
// merges them, so routes mounted by other parts (billing) are documented in the same file.
package openapi

import (
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"time"
)

// Document is an OpenAPI 3.0 document (the subset we use).
type Document struct {
	OpenAPI    string                `json:"openapi"`
	Info       Info                  `json:"info"`
	Paths      map[string]PathItem   `json:"paths"`
	Components Components            `json:"components"`
	Security   []map[string][]string `json:"security,omitempty"`
}

// Info describes the API.
type Info struct {
	Title   string `json:"title"`
	Version string `json:"version"`
}

// Components holds shared schemas and security schemes.
type Components struct {
	Schemas         map[string]Schema         `json:"schemas"`
	SecuritySchemes map[string]map[string]any `json:"securitySchemes,omitempty"`
}

// PathItem maps a lower-case HTTP method to its operation.
type PathItem map[string]*Operation

// Operation is one method on one path.
type Operation struct {
	OperationID string                `json:"operationId"`
	Summary     string                `json:"summary"`
	Tags        []string              `json:"tags,omitempty"`
	Parameters  []Parameter           `json:"parameters,omitempty"`
	RequestBody *RequestBody          `json:"requestBody,omitempty"`
	Responses   map[string]Response   `json:"responses"`
	Security    []map[string][]string `json:"security,omitempty"`
}

// Parameter is a path, query or header parameter.
type Parameter struct {
	Name        string `json:"name"`
	In          string `json:"in"`
	Description string `json:"description,omitempty"`
	Required    bool   `json:"required,omitempty"`
	Schema      Schema `json:"schema"`
}

// QueryParam is an optional query parameter.
func QueryParam(name string, schema Schema, description string) Parameter {
	return Parameter{Name: name, In: "query", Description: description, Schema: schema}
}

// Params adds parameters to an operation already built by Op; it panics on an unknown one (a
// programming error, found by any test that builds the document).
func (d *Document) Params(method, path string, params ...Parameter) {
	op := d.Paths[path][strings.ToLower(method)]
	if op == nil {
		panic("openapi: no operation " + method + " " + path)
	}
	op.Parameters = append(op.Parameters, params...)
}

// RequestBody is a JSON body.
type RequestBody struct {
	Required bool                 `json:"required"`
	Content  map[string]MediaType `json:"content"`
}

// Response is one status's answer.
type Response struct {
	Description string               `json:"description"`
	Content     map[string]MediaType `json:"content,omitempty"`
}

// MediaType carries a schema.
type MediaType struct {
	Schema Schema `json:"schema"`
}

// Schema is a JSON schema object.
type Schema map[string]any

// New returns an empty document.
func New(title, version string) *Document {
	return &Document{
		OpenAPI: "3.0.3",
		Info:    Info{Title: title, Version: version},
		Paths:   map[string]PathItem{},
		Components: Components{
			Schemas: map[string]Schema{},
			SecuritySchemes: map[string]map[string]any{
				"bearer": {"type": "http", "scheme": "bearer"},
			},
		},
		Security: []map[string][]string{{"bearer": {}}},
	}
}

// Merge adds paths; documenting the same method on the same path twice is an error.
func (d *Document) Merge(paths map[string]PathItem) error {
	for p, item := range paths {
		cur, ok := d.Paths[p]
		if !ok {
			cur = PathItem{}
			d.Paths[p] = cur
		}
		for m, op := range item {
			if _, dup := cur[m]; dup {
				return fmt.Errorf("openapi: %s %s documented twice", strings.ToUpper(m), p)
			}
			cur[m] = op
		}
	}
	return nil
}

// Operations lists "METHOD /path" for every documented operation, sorted.
func (d *Document) Operations() []string {
	var out []string
	for p, item := range d.Paths {
		for m := range item {
			out = append(out, strings.ToUpper(m)+" "+p)
		}
	}
	sort.Strings(out)
	return out
}

// Op builds an operation. req and resp are Go values whose types give the schemas (nil: none);
// status is the success status. Path parameters are taken from {name} segments of path.
func (d *Document) Op(method, path, id, summary, tag string, req, resp any, status int) {
	op := &Operation{OperationID: id, Summary: summary, Tags: []string{tag}, Responses: map[string]Response{}}
	for _, seg := range strings.Split(path, "/") {
		if strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") {
			op.Parameters = append(op.Parameters, Parameter{Name: seg[1 : len(seg)-1], In: "path", Required: true, Schema: Schema{"type": "string"}})
		}
	}
	if req != nil {
		op.RequestBody = &RequestBody{Required: true, Content: map[string]MediaType{"application/json": {Schema: d.SchemaFor(req)}}}
	}
	if method == http.MethodPost && !strings.Contains(path, "/agent/") {
		op.Parameters = append(op.Parameters, Parameter{Name: "Idempotency-Key", In: "header", Schema: Schema{"type": "string"}})
	}
	ok := Response{Description: http.StatusText(status)}
	if resp != nil {
		ok.Content = map[string]MediaType{"application/json": {Schema: d.SchemaFor(resp)}}
	}
	op.Responses[fmt.Sprint(status)] = ok
	op.Responses["default"] = Response{Description: "Error", Content: map[string]MediaType{
		"application/problem+json": {Schema: Schema{"$ref": "#/components/schemas/Problem"}}}}
	item := d.Paths[path]
	if item == nil {
		item = PathItem{}
		d.Paths[path] = item
	}
	item[strings.ToLower(method)] = op
}

// SchemaFor returns a schema for v's type, registering named struct types under components.
func (d *Document) SchemaFor(v any) Schema { return d.schema(reflect.TypeOf(v)) }

var (
	timeType = reflect.TypeOf(time.Time{})
	pkgPath  = regexp.MustCompile(`[A-Za-z0-9_/.-]*[/.]`)
)

// schemaName makes a component name from a Go type name: package paths are dropped and generic
// arguments folded in, so Page[gpucloud/apiserver/store.Host] becomes PageHost.
func schemaName(goName string) string {
	n := pkgPath.ReplaceAllString(goName, "")
	return strings.NewReplacer("[", "", "]", "", ",", "").Replace(n)
}

func (d *Document) schema(t reflect.Type) Schema {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == timeType:
		return Schema{"type": "string", "format": "date-time"}
	case t.PkgPath() == "github.com/google/uuid" && t.Name() == "UUID":
		return Schema{"type": "string", "format": "uuid"}
	}
	switch t.Kind() {
	case reflect.Bool:
		return Schema{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return Schema{"type": "integer"}
	case reflect.Float32, reflect.Float64:
		return Schema{"type": "number"}
	case reflect.String:
		return Schema{"type": "string"}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return Schema{"type": "string", "format": "byte"}
		}
		return Schema{"type": "array", "items": d.schema(t.Elem())}
	case reflect.Map:
		return Schema{"type": "object", "additionalProperties": d.schema(t.Elem())}
	case reflect.Struct:
		name := schemaName(t.Name())
		if name != "" {
			if _, ok := d.Components.Schemas[name]; ok {
				return Schema{"$ref": "#/components/schemas/" + name}
			}
			d.Components.Schemas[name] = Schema{} // break cycles
		}
		props := map[string]any{}
		var required []string
		d.fields(t, props, &required)
		s := Schema{"type": "object", "properties": props}
		if len(required) > 0 {
			s["required"] = required
		}
		if name == "" {
			return s
		}
		d.Components.Schemas[name] = s
		return Schema{"$ref": "#/components/schemas/" + name}
	}
	return Schema{}
}

// fields adds t's JSON fields to props. A field's `doc:"..."` tag is its description (say the
// unit there); `required:"true"` or `validate:"required"` (gpucloud/internal/validate) puts it in the
// schema's required list.
func (d *Document) fields(t reflect.Type, props map[string]any, required *[]string) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			d.fields(f.Type, props, required)
			continue
		}
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		ps := d.schema(f.Type)
		if doc := f.Tag.Get("doc"); doc != "" {
			described := Schema{"description": doc}
			for k, v := range ps {
				described[k] = v
			}
			ps = described
		}
		props[name] = ps
		if f.Tag.Get("required") == "true" || f.Tag.Get("validate") == "required" {
			*required = append(*required, name)
		}
	}
}
