package server

import (
	"errors"
	"testing"

	"gpucloud/api"
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
