// Package problem writes API errors as RFC 9457 problem details (application/problem+json),
// the one error shape of every HTTP endpoint of the platform.
package problem

import (
	"encoding/json"
	"net/http"
)

// ContentType is the media type of problem documents.
const ContentType = "application/problem+json"

// FieldError names one invalid input field.
type FieldError struct {
	Field  string `json:"field"`
	Reason string `json:"reason"`
}

// Details is a problem document. Type is a stable machine-readable code ("quota-exceeded").
type Details struct {
	Type      string       `json:"type"`
	Title     string       `json:"title"`
	Status    int          `json:"status"`
	Detail    string       `json:"detail,omitempty"`
	Instance  string       `json:"instance,omitempty"`
	RequestID string       `json:"request_id,omitempty"`
	Retryable bool         `json:"retryable,omitempty"`
	Fields    []FieldError `json:"fields,omitempty"`
}

func (d *Details) Error() string {
	if d.Detail != "" {
		return d.Title + ": " + d.Detail
	}
	return d.Title
}

// New builds a problem.
func New(status int, typ, title, detail string) *Details {
	return &Details{Type: typ, Title: title, Status: status, Detail: detail}
}

// Validation is a 400 naming every bad field.
func Validation(fields ...FieldError) *Details {
	d := New(http.StatusBadRequest, "validation-failed", "Invalid request", "")
	d.Fields = fields
	if len(fields) > 0 {
		d.Detail = fields[0].Field + ": " + fields[0].Reason
	}
	return d
}

// Write sends d as the response.
func Write(w http.ResponseWriter, d *Details) {
	w.Header().Set("Content-Type", ContentType)
	if d.Retryable && w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", "1")
	}
	w.WriteHeader(d.Status)
	_ = json.NewEncoder(w).Encode(d)
}
