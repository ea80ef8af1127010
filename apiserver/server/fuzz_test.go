package server

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/gin-gonic/gin"

	"gpucloud/api"
	"gpucloud/apiserver/store"
	"gpucloud/internal/problem"
)

// decodeJSON takes untrusted bodies: it must never panic, and every refusal is a 4xx problem.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{`{"name":"a","instance_type_id":"0190c0de-0000-7000-8000-000000000000","image":"u"}`,
		`{"state":"running","reboot_generation":3}`, `{`, `[]`, `{"x":1}`, `{"name":1e999}`, "\x00", `{"gpus":[{"uuid":"a"}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, v := range []any{&CreateInstanceRequest{}, &api.InstanceObserved{}, &api.GPUServerReport{}} {
			err := decodeJSON(body, v)
			if err == nil {
				continue
			}
			var d *problem.Details
			if !errors.As(err, &d) || d.Status < 400 || d.Status > 499 || d.Type == "" {
				t.Fatalf("decode %q: %v is not a 4xx problem", body, err)
			}
		}
	})
}

// The instance list's query string is untrusted: instanceFilter never panics, refuses with a 400
// problem, and what it accepts holds only known states.
func FuzzInstanceFilter(f *testing.F) {
	for _, s := range []string{"", "state=running", "state=running,deleted&state=pending", "host_id=0190c0de-0000-7000-8000-000000000000",
		"gpu_server_id=x", "include_deleted=true", "include_deleted=maybe", "state=", "state=%00", "host_id=&host_id=1",
		"condition=HostReachable=False", "condition=GPUServerReachable=True,HostReachable=False", "condition=HostReachable", "condition=x=False&condition="} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, query string) {
		c, _ := gin.CreateTestContext(httptest.NewRecorder())
		c.Request = httptest.NewRequest(http.MethodGet, "/v1/instances", nil)
		c.Request.URL.RawQuery = query
		got, err := instanceFilter(c)
		if err != nil {
			var d *problem.Details
			if !errors.As(err, &d) || d.Status != http.StatusBadRequest {
				t.Fatalf("?%s: %v is not a 400 problem", query, err)
			}
			return
		}
		for _, st := range got.States {
			if !slices.Contains(store.States, st) {
				t.Fatalf("?%s: accepted state %q", query, st)
			}
		}
		for _, cf := range got.Conditions {
			if !slices.Contains(store.ConditionTypes, cf.Type) || (cf.Status != store.CondTrue && cf.Status != store.CondFalse) {
				t.Fatalf("?%s: accepted condition %+v", query, cf)
			}
		}
	})
}
