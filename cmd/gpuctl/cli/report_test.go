package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"gpucloud/cmd/gpuctl/cli"
	"gpucloud/sdk"
)

// TestReportAgainstBillingShape runs "report gpu-hours" against a stand-in for billing's
// GET /v1/reports/gpu-hours (its answer shape copied from billing/report.Report), checking
// the exact query gpuctl sends and each output. TestReportCommand runs it against billing
// itself, where the query cannot be seen.
func TestReportAgainstBillingShape(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.URL.Path+"?"+r.URL.RawQuery)
		if r.URL.Query().Get("format") == "csv" {
			w.Header().Set("Content-Type", "text/csv")
			w.Write([]byte("bucket,group,gpu_hours\n2026-03,shared,1.500000\n"))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"from":"2026-03-01T00:00:00Z","to":"2026-04-01T00:00:00Z","group_by":"tier","granularity":"month",
			"currency":"USD","rows":[{"bucket":"2026-03","group":"shared","gpu_ms":5400000,"gpu_hours":"1.500000","records":3,
			"revenue_cents":375,"revenue":"3.75","unpriced_gpu_ms":0}],
			"total":{"bucket":"","group":"","gpu_ms":5400000,"gpu_hours":"1.500000","records":3,"revenue_cents":375,"revenue":"3.75","unpriced_gpu_ms":0}}`))
	}))
	defer srv.Close()
	run := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		env := map[string]string{"GPUCLOUD_API_URL": srv.URL, "GPUCLOUD_API_KEY": "k", "XDG_CONFIG_HOME": t.TempDir()}
		code := cli.Run(context.Background(), args, cli.IO{Out: &out, Err: &errb, Getenv: func(k string) string { return env[k] }})
		return code, out.String() + errb.String()
	}
	code, out := run("report", "gpu-hours", "--from", "2026-03-01", "--to", "2026-04-01", "--granularity", "month")
	if code != 0 || !strings.Contains(out, "TOTAL") || !strings.Contains(out, "3.75 USD") || !strings.Contains(out, "1.500000") {
		t.Fatalf("table: %d\n%s", code, out)
	}
	want := "/v1/reports/gpu-hours?from=2026-03-01T00%3A00%3A00Z&granularity=month&group_by=tier&to=2026-04-01T00%3A00%3A00Z"
	if got[0] != want {
		t.Fatalf("query %s, want %s", got[0], want)
	}
	code, out = run("report", "gpu-hours", "-o", "json", "--group-by", "tenant")
	var rep sdk.GPUHoursReport
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil || rep.Total.RevenueCents != 375 || len(rep.Rows) != 1 {
		t.Fatalf("json: %d %v\n%s", code, err, out)
	}
	if !strings.Contains(got[1], "group_by=tenant") || strings.Contains(got[1], "from=") {
		t.Fatalf("second query %s", got[1])
	}
	code, out = run("report", "gpu-hours", "--format", "csv")
	if code != 0 || out != "bucket,group,gpu_hours\n2026-03,shared,1.500000\n" || !strings.Contains(got[2], "format=csv") {
		t.Fatalf("csv: %d %q (query %s)", code, out, got[2])
	}
}
