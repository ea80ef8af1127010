package server_test

import (
	"slices"
	"strings"
	"testing"
)

// The document says which body fields are required and what units numbers are in.
func TestOpenAPIRequiredAndUnits(t *testing.T) {
	e := newEnv(t)
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Required   []string `json:"required"`
				Properties map[string]struct {
					Description string `json:"description"`
				} `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	e.must(200, "GET", "/v1/openapi.json", "", nil, &doc)
	s := doc.Components.Schemas
	for schema, want := range map[string][]string{
		"CreateInstanceRequest": {"name", "instance_type_id", "image"},
		"CreateImageRequest":    {"name", "source", "sha256", "min_disk_gib"},
		"CreateSSHKeyRequest":   {"name", "public_key"},
	} {
		if got := s[schema].Required; !slices.Equal(got, want) {
			t.Errorf("%s required %v, want %v", schema, got, want)
		}
	}
	for _, schema := range []string{"InstanceType", "CreateInstanceTypeRequest"} {
		if d := s[schema].Properties["price_per_hour"].Description; !strings.Contains(d, "cents") {
			t.Errorf("%s.price_per_hour description %q names no unit", schema, d)
		}
	}
	if !slices.Contains(s["CreateInstanceTypeRequest"].Required, "price_per_hour") {
		t.Errorf("CreateInstanceTypeRequest required %v", s["CreateInstanceTypeRequest"].Required)
	}
}
