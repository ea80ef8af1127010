package httpapi

import (
	"encoding/json"
	"fmt"
	"gpucloud/api"
	"reflect"
	"testing"
	"time"

	"gpucloud/billing/billingtest"
	"gpucloud/internal/cputime"
	"gpucloud/internal/problem"
)

// decodeUsage decodes a well-formed batch in one pass; whatever the body, its answer must be the
// record-by-record decoder's: the same records at the same positions, the same refusals, the
// same error.
func FuzzDecodeUsageMatchesEach(f *testing.F) {
	g := billingtest.NewGenerator(3, 4, time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), "fuzz")
	good, _ := json.Marshal(g.Batch(3))
	for _, seed := range []string{
		string(good),
		`{"records":[{"id":"a","gpu_count":"two"},{"id":"b"}]}`,
		`{"records":[]}`, `{"records":null}`, `{}`, `[]`, `{"records":[null,{"id":1}]}`,
		`{"records":[{"id":"a"}]} trailing`, `{"records":[{"id":"a","start":"yesterday"}]}`,
		`{"records":[{"id":"a","memory_quota":-1}]}`, `{"records":`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, gotErr := decodeUsage(body)
		want, wantErr := decodeEach(body)
		if (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Detail != wantErr.Detail {
			t.Fatalf("errors differ: %v / %v", gotErr, wantErr)
		}
		if len(got.batch.Records) != len(want.batch.Records) || fmt.Sprint(got.index) != fmt.Sprint(want.index) ||
			!reflect.DeepEqual(got.undecodable, want.undecodable) {
			t.Fatalf("decoded %+v, record by record %+v", got, want)
		}
		for i := range got.batch.Records {
			if !reflect.DeepEqual(got.batch.Records[i], want.batch.Records[i]) {
				t.Fatalf("record %d: %+v, record by record %+v", i, got.batch.Records[i], want.batch.Records[i])
			}
		}
	})
}

// A full batch of well-formed records, as gpuserverd sends them, decoded both ways: what a
// record costs the apiserver before billing sees it. Measured, not asserted:
//
//	go test ./billing/httpapi -run '^$' -bench DecodeUsage -benchtime 50x
func BenchmarkDecodeUsage(b *testing.B) {
	g := billingtest.NewGenerator(5, 10000, time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), "bench")
	batch := g.Batch(1000)
	body, err := json.Marshal(batch)
	if err != nil {
		b.Fatal(err)
	}
	bin := api.AppendUsageBatch(nil, batch.Records)
	for name, decode := range map[string]func([]byte) (decodedUsage, *problem.Details){
		"one-pass": decodeUsage, "record-by-record": decodeEach,
		"binary": func([]byte) (decodedUsage, *problem.Details) { return decodeUsageAs(api.UsageBatchBinary, bin) },
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := cputime.Self()
			for b.Loop() {
				d, err := decode(body)
				if err != nil || len(d.batch.Records) != 1000 {
					b.Fatal(len(d.batch.Records), err)
				}
			}
			// CPU time (this process, GC included) is what to compare on a shared machine.
			b.ReportMetric(float64((cputime.Self()-cpu0).Nanoseconds())/float64(b.N)/1000, "cpu-ns/record")
		})
	}
}
