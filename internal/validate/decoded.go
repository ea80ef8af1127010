package validate

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
)

// FieldError names a field of a request and what is wrong with it.
type FieldError struct {
	Field, Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Decoded checks a decoded JSON request body (a pointer to a struct) against what PostgreSQL
// will store, so bad input is a 400 naming the field rather than a 500 from the database:
//
//   - a string must not hold a NUL byte (text columns refuse it);
//   - a Go int is an SQL integer: it must fit 32 bits; a uint64 is a bigint: it must fit 63;
//   - a pointer field tagged `validate:"required"` must be present (not absent, not null).
//
// Field names are the JSON names, with the path to nested ones ("gpus[2].name").
func Decoded(v any) *FieldError {
	return walk(reflect.ValueOf(v), "")
}

func walk(v reflect.Value, path string) *FieldError {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return walk(v.Elem(), path)
	case reflect.Struct:
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, ok := jsonName(f)
			if !ok {
				continue
			}
			if f.Anonymous && f.Tag.Get("json") == "" {
				if err := walk(v.Field(i), path); err != nil {
					return err
				}
				continue
			}
			fv := v.Field(i)
			if f.Tag.Get("validate") == "required" && fv.Kind() == reflect.Pointer && fv.IsNil() {
				return &FieldError{join(path, name), "is required"}
			}
			if err := walk(fv, join(path, name)); err != nil {
				return err
			}
		}
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return nil // []byte is base64 in JSON
		}
		for i := 0; i < v.Len(); i++ {
			if err := walk(v.Index(i), path+"["+strconv.Itoa(i)+"]"); err != nil {
				return err
			}
		}
	case reflect.Map:
		iter := v.MapRange()
		for iter.Next() {
			k := fmt.Sprint(iter.Key().Interface())
			if strings.IndexByte(k, 0) >= 0 {
				return &FieldError{join(path, "<key>"), "contains a NUL byte"}
			}
			if err := walk(iter.Value(), join(path, k)); err != nil {
				return err
			}
		}
	case reflect.String:
		if strings.IndexByte(v.String(), 0) >= 0 {
			return &FieldError{orBody(path), "contains a NUL byte"}
		}
	case reflect.Int:
		if n := v.Int(); n < math.MinInt32 || n > math.MaxInt32 {
			return &FieldError{orBody(path), fmt.Sprintf("%d is out of range %d..%d (a 32-bit integer)", n, math.MinInt32, math.MaxInt32)}
		}
	case reflect.Uint, reflect.Uint64:
		if n := v.Uint(); n > math.MaxInt64 {
			return &FieldError{orBody(path), fmt.Sprintf("%d is out of range 0..%d (a 64-bit signed integer)", n, int64(math.MaxInt64))}
		}
	}
	return nil
}

func jsonName(f reflect.StructField) (string, bool) {
	tag := f.Tag.Get("json")
	if tag == "-" {
		return "", false
	}
	name, _, _ := strings.Cut(tag, ",")
	if name == "" {
		name = f.Name
	}
	return name, true
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func orBody(path string) string {
	if path == "" {
		return "body"
	}
	return path
}
