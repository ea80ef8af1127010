package sdk_test

import (
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"gpucloud/sdk"
	"gpucloud/sdk/sdktest"
)

// browserOnly are documented operations meant for the web console alone: they set and clear the
// session cookie, which an API-key client never holds.
var browserOnly = []string{"POST /v1/session", "DELETE /v1/session"}

type document struct {
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Schemas map[string]struct {
			Properties map[string]json.RawMessage `json:"properties"`
		} `json:"schemas"`
	} `json:"components"`
}

func fetchDocument(t *testing.T, url string) document {
	t.Helper()
	var d document
	decodeDocument(t, url, &d)
	if len(d.Paths) == 0 {
		t.Fatal("the OpenAPI document has no paths")
	}
	return d
}

// decodeDocument decodes the served OpenAPI document into v (each test declares what it reads).
func decodeDocument(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url + "/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("decode OpenAPI document: %v", err)
	}
}

// TestOperationsMatchOpenAPI checks the SDK's route table against the served document both
// ways: everything the SDK calls is documented, everything documented has an SDK call.
func TestOperationsMatchOpenAPI(t *testing.T) {
	e := sdktest.New(t)
	d := fetchDocument(t, e.URL)
	documented := map[string]bool{}
	for p, item := range d.Paths {
		for m := range item {
			documented[strings.ToUpper(m)+" "+p] = true
		}
	}
	inSDK := map[string]bool{}
	for _, o := range sdk.Ops() {
		inSDK[o.String()] = true
		if !documented[o.String()] {
			t.Errorf("SDK calls %s, which the OpenAPI document does not have", o)
		}
	}
	var missing []string
	for op := range documented {
		if !inSDK[op] && !slices.Contains(browserOnly, op) {
			missing = append(missing, op)
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("documented operation %s has no SDK method", m)
	}
	if len(inSDK) < 40 {
		t.Fatalf("only %d SDK operations: the table in ops.go was not read", len(inSDK))
	}
}

// TestTypesMatchSchemas checks that each SDK type has exactly the JSON fields of the schema
// the document gives the same resource, so a renamed or added field shows up here.
func TestTypesMatchSchemas(t *testing.T) {
	e := sdktest.New(t)
	d := fetchDocument(t, e.URL)
	pairs := map[string]any{
		"Me": sdk.Me{}, "Tenant": sdk.Tenant{}, "CreateTenantRequest": sdk.CreateTenantRequest{}, "QuotaRequest": sdk.Quota{},
		"User": sdk.User{}, "CreateUserRequest": sdk.CreateUserRequest{}, "APIKey": sdk.APIKey{}, "NewAPIKey": sdk.NewAPIKey{},
		"GPUModel": sdk.GPUModel{}, "CreateGPUModelRequest": sdk.CreateGPUModelRequest{}, "Tier": sdk.Tier{},
		"InstanceType": sdk.InstanceType{}, "CreateInstanceTypeRequest": sdk.CreateInstanceTypeRequest{},
		"Instance": sdk.Instance{}, "CreateInstanceRequest": sdk.CreateInstanceRequest{}, "Event": sdk.Event{},
		"Host": sdk.Host{}, "GPUServer": sdk.GPUServer{}, "GPU": sdk.GPU{}, "NewDaemon": sdk.NewDaemon{},
		"AuditEntry": sdk.AuditEntry{}, "Problem": sdk.APIError{}, "Condition": sdk.Condition{},
		"Image": sdk.Image{}, "CreateImageRequest": sdk.CreateImageRequest{},
		"SSHKey": sdk.SSHKey{}, "CreateSSHKeyRequest": sdk.CreateSSHKeyRequest{},
		"Volume": sdk.Volume{}, "CreateVolumeRequest": sdk.CreateVolumeRequest{}, "AttachVolumeRequest": sdk.AttachVolumeRequest{},
		"ConsoleLog": sdk.ConsoleLog{}, "SSHEndpoint": sdk.SSHEndpoint{}, "PortForward": sdk.PortForward{},
	}
	for name, v := range pairs {
		s, ok := d.Components.Schemas[name]
		if !ok {
			t.Errorf("schema %s is not in the document", name)
			continue
		}
		var want []string
		for p := range s.Properties {
			want = append(want, p)
		}
		sort.Strings(want)
		got := jsonFields(reflect.TypeOf(v))
		if !slices.Equal(got, want) {
			t.Errorf("%s: SDK fields %v, document %v", name, got, want)
		}
	}
}

func jsonFields(t reflect.Type) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Anonymous {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "-" && f.IsExported() {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// TestIdempotencyKeyWhereDocumented checks the SDK sends Idempotency-Key exactly on the
// operations whose documentation declares the header.
func TestIdempotencyKeyWhereDocumented(t *testing.T) {
	e := sdktest.New(t)
	var d struct {
		Paths map[string]map[string]struct {
			Parameters []struct{ Name, In string } `json:"parameters"`
		} `json:"paths"`
	}
	decodeDocument(t, e.URL, &d)
	checked := 0
	for _, o := range sdk.Ops() {
		op, ok := d.Paths[o.Path][strings.ToLower(o.Method)]
		if !ok {
			continue
		}
		documented := slices.ContainsFunc(op.Parameters, func(p struct{ Name, In string }) bool {
			return p.Name == "Idempotency-Key" && p.In == "header"
		})
		if documented != sdk.SendsIdempotencyKey(o) {
			t.Errorf("%s: documented Idempotency-Key %v, SDK sends it %v", o, documented, sdk.SendsIdempotencyKey(o))
		}
		checked++
	}
	if checked < 40 {
		t.Fatalf("checked %d operations", checked)
	}
}

// TestBillingBodiesMatchDocument checks the SDK's billing request bodies against the schemas
// billing documents inline (its answers are documented as plain objects, so only the requests
// can be checked).
func TestBillingBodiesMatchDocument(t *testing.T) {
	e := sdktest.New(t)
	var d struct {
		Paths map[string]map[string]struct {
			RequestBody struct {
				Content map[string]struct {
					Schema struct {
						Properties map[string]json.RawMessage `json:"properties"`
					} `json:"schema"`
				} `json:"content"`
			} `json:"requestBody"`
		} `json:"paths"`
	}
	decodeDocument(t, e.URL, &d)
	for op, got := range map[string][]string{
		"POST /v1/prices":        jsonFields(reflect.TypeOf(sdk.AddPriceRequest{})),
		"POST /v1/periods/close": jsonFields(reflect.TypeOf(sdk.ClosePeriodRequest{})),
	} {
		method, path, _ := strings.Cut(op, " ")
		var want []string
		for p := range d.Paths[path][strings.ToLower(method)].RequestBody.Content["application/json"].Schema.Properties {
			want = append(want, p)
		}
		sort.Strings(want)
		if len(want) == 0 || !slices.Equal(got, want) {
			t.Errorf("%s: SDK sends %v, document has %v", op, got, want)
		}
	}
}
