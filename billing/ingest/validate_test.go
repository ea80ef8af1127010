package ingest

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"gpucloud/api"
)

var now = time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)

func goodGPU() api.UsageRecord {
	start := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	return api.UsageRecord{ID: "s/1/1", Kind: api.UsageGPU, Source: "s", TenantID: "1b4e28ba-2fa1-11d2-883f-0016d3cca427",
		InstanceID: "i", Start: start, End: start.Add(time.Minute), GPUModel: "H100", Tier: "dedicated", GPUCount: 1}
}

func TestValidateNamesTheField(t *testing.T) {
	cases := []struct {
		field string
		edit  func(*api.UsageRecord)
	}{
		{"id", func(r *api.UsageRecord) { r.ID = "" }},
		{"id", func(r *api.UsageRecord) { r.ID = "a\nb" }},
		{"id", func(r *api.UsageRecord) { r.ID = strings.Repeat("x", MaxIDLen+1) }},
		{"source", func(r *api.UsageRecord) { r.Source = " s" }},
		{"tenant_id", func(r *api.UsageRecord) { r.TenantID = "00000000-0000-0000-0000-000000000000" }},
		{"instance_id", func(r *api.UsageRecord) { r.InstanceID = "" }},
		{"start", func(r *api.UsageRecord) { r.Start = time.Time{} }},
		{"end", func(r *api.UsageRecord) { r.End = r.Start }},
		{"end", func(r *api.UsageRecord) { r.End = r.Start.Add(25 * time.Hour) }},
		{"end", func(r *api.UsageRecord) { r.Start, r.End = now, now.Add(time.Hour) }},
		{"kind", func(r *api.UsageRecord) { r.Kind = "GPU" }},
		{"gpu_model", func(r *api.UsageRecord) { r.GPUModel = "" }},
		{"tier", func(r *api.UsageRecord) { r.Tier = "" }},
		{"gpu_count", func(r *api.UsageRecord) { r.GPUCount = 0 }},
		{"gpu_count", func(r *api.UsageRecord) { r.GPUCount = MaxGPUCount + 1 }},
		{"memory_quota", func(r *api.UsageRecord) { r.Tier = TierShared }},
		{"memory_avg_bytes", func(r *api.UsageRecord) { r.MemoryAvgBytes = 2; r.MemoryPeakBytes = 1 }},
		{"bytes_moved", func(r *api.UsageRecord) { r.BytesMoved = 1 << 63 }},
		{"instance_type", func(r *api.UsageRecord) { r.Kind = api.UsageVM }},
		{"vcpus", func(r *api.UsageRecord) { r.Kind, r.InstanceType = api.UsageVM, "t" }},
		{"memory_mib", func(r *api.UsageRecord) { r.Kind, r.InstanceType, r.VCPUs = api.UsageVM, "t", 1 }},
	}
	for _, c := range cases {
		r := goodGPU()
		c.edit(&r)
		_, err := Validate(r, now)
		if err == nil || !strings.HasPrefix(err.Error(), c.field+":") {
			t.Errorf("record %+v: err %v, want one about %s", r, err, c.field)
		}
	}
	n, err := Validate(goodGPU(), now)
	if err != nil {
		t.Fatalf("good record refused: %v", err)
	}
	if n.Start.Location() != time.UTC {
		t.Fatalf("start not normalised to UTC")
	}
}

// FuzzValidate: Validate never panics, and whatever it accepts is something the database and the
// rollup arithmetic can hold.
func FuzzValidate(f *testing.F) {
	good, _ := json.Marshal(goodGPU())
	f.Add(good)
	f.Add([]byte(`{"id":"x","kind":"vm","source":"h","tenant_id":"1b4e28ba-2fa1-11d2-883f-0016d3cca427","instance_id":"i","start":"2026-03-01T00:00:00Z","end":"2026-03-01T01:00:00.5Z","instance_type":"t","vcpus":2,"memory_mib":1024}`))
	f.Add([]byte(`{"kind":"gpu","tier":"shared","memory_quota":18446744073709551615,"gpu_count":-1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var r api.UsageRecord
		if json.Unmarshal(data, &r) != nil {
			return
		}
		n, err := Validate(r, now)
		if err != nil {
			if err.Error() == "" || !strings.Contains(err.Error(), ":") {
				t.Fatalf("reason %q does not name a field", err)
			}
			return
		}
		d := n.End.Sub(n.Start)
		if d <= 0 || d > MaxInterval || n.Start.Year() < 2000 || n.End.After(now.Add(MaxFutureSkew)) {
			t.Fatalf("accepted bad interval %s .. %s", n.Start, n.End)
		}
		if n.Start.Truncate(time.Millisecond) != n.Start || n.End.Truncate(time.Millisecond) != n.End {
			t.Fatalf("times not truncated to ms")
		}
		switch n.Kind {
		case api.UsageGPU:
			if n.GPUCount < 1 || n.GPUCount > MaxGPUCount || n.MemoryQuota > MaxMemoryQuota || n.BytesMoved >= 1<<63 {
				t.Fatalf("accepted out-of-range gpu record %+v", n)
			}
			if n.InstanceType != "" {
				t.Fatalf("vm field kept on a gpu record")
			}
		case api.UsageVM:
			if n.VCPUs < 1 || n.MemoryMiB < 1 || n.InstanceType == "" || n.GPUModel != "" || n.Tier != "" {
				t.Fatalf("accepted bad vm record %+v", n)
			}
		default:
			t.Fatalf("accepted kind %q", n.Kind)
		}
		again, err := Validate(n, now)
		if err != nil || again != n {
			t.Fatalf("normalised record not stable: %v", err)
		}
	})
}
