package api_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"gpucloud/api"
)

func sampleUsage() []api.UsageRecord {
	start := time.Date(2026, 3, 1, 10, 0, 0, 123_000_000, time.UTC)
	return []api.UsageRecord{
		{ID: "gs/1", Kind: api.UsageGPU, Source: "gs", TenantID: "00000000-0000-4000-8000-000000000001",
			InstanceID: "inst", SessionID: "sess", Start: start, End: start.Add(time.Minute), GPUModel: "NVIDIA H100 80GB HBM3",
			Tier: "shared", GPUCount: 2, MemoryQuota: 20 << 30, MemoryPeakBytes: 1 << 40, MemoryAvgBytes: 7, BytesMoved: 1<<64 - 1},
		{ID: "h/2", Kind: api.UsageVM, Source: "h", TenantID: "t", InstanceID: "i", Start: start.Add(-time.Hour), End: start,
			InstanceType: "g1.large", VCPUs: 8, MemoryMiB: 32768},
		{ID: "négatif", GPUCount: -3, VCPUs: -1, Start: time.Unix(0, -5).UTC(), End: time.Unix(0, 0).UTC()},
	}
}

func TestUsageBatchBinaryRoundTrip(t *testing.T) {
	recs := sampleUsage()
	got, err := api.DecodeUsageBatch(api.AppendUsageBatch(nil, recs))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Records, recs) {
		t.Fatalf("decoded\n%+v\nwant\n%+v", got.Records, recs)
	}
	if got, err := api.DecodeUsageBatch(api.AppendUsageBatch(nil, nil)); err != nil || got.Records == nil || len(got.Records) != 0 {
		t.Fatalf("empty batch: %+v %v", got, err)
	}
}

// The decoder reuses a field's string from the record before when the bytes are equal: fields of
// the same length with other bytes, or equal after a different one, still read as sent.
func TestUsageBatchBinaryRepeatedFields(t *testing.T) {
	r := sampleUsage()[0]
	recs := []api.UsageRecord{r, r, r, r}
	recs[1].GPUModel, recs[1].Source, recs[1].Tier = "NVIDIA A100 80GB HBM3", "gt", "sharex"
	recs[2].Kind = api.UsageVM
	recs[3].Source, recs[3].InstanceType = "", "g1.large"
	got, err := api.DecodeUsageBatch(api.AppendUsageBatch(nil, recs))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Records, recs) {
		t.Fatalf("decoded\n%+v\nwant\n%+v", got.Records, recs)
	}
}

// A body the decoder cannot read whole is refused with the field where reading stopped.
func TestUsageBatchBinaryNamesTheField(t *testing.T) {
	good := api.AppendUsageBatch(nil, sampleUsage())
	over := api.AppendUsageBatch(nil, make([]api.UsageRecord, api.MaxUsageBatch+1))
	long := api.AppendUsageBatch(nil, []api.UsageRecord{{ID: "x", TenantID: strings.Repeat("t", 5000)}})
	bigCount := api.AppendUsageBatch(nil, []api.UsageRecord{{GPUCount: 1 << 40}})
	for _, c := range []struct {
		name, field string
		body        []byte
	}{
		{"json", "records", []byte(`{"records":[]}`)},
		{"cut in the first id", "records[0].id", good[:7]},
		{"cut in the last field", "records[2].memory_mib", good[:len(good)-1]},
		{"trailing bytes", "records", append(append([]byte{}, good...), 0)},
		{"too many records", "records", over},
		{"string too long", "records[0].tenant_id", long},
		{"count out of range", "records[0].gpu_count", bigCount},
	} {
		_, err := api.DecodeUsageBatch(c.body)
		var de *api.UsageDecodeError
		if !errors.As(err, &de) || de.Field != c.field {
			t.Errorf("%s: %v, want an error naming %s", c.name, err, c.field)
		}
	}
}

// Any body: no panic; what decodes encodes back to the same bytes (the form has one encoding per
// batch), so nothing is read that was not written.
func FuzzDecodeUsageBatch(f *testing.F) {
	f.Add(api.AppendUsageBatch(nil, sampleUsage()))
	f.Add(api.AppendUsageBatch(nil, nil))
	f.Add([]byte("GCU1\x01\x01"))
	f.Fuzz(func(t *testing.T, body []byte) {
		b, err := api.DecodeUsageBatch(body)
		if err != nil {
			return
		}
		if again := api.AppendUsageBatch(nil, b.Records); string(again) != string(body) {
			t.Fatalf("re-encoded %x, read %x", again, body)
		}
	})
}

func TestUsageBatchBinaryRefusesLongVarints(t *testing.T) {
	// Record count 1 written in two bytes instead of one.
	if _, err := api.DecodeUsageBatch([]byte("GCU1\x81\x00")); err == nil {
		t.Fatal("a count in a longer form than its shortest was read")
	}
}
