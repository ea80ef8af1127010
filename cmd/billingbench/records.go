package main

import (
	"fmt"
	"sync"
	"time"

	"gpucloud/api"
	"gpucloud/billing/billingtest"
)

// Each worker sends its share of the records: the same tenants for every worker (same seed for
// the tenant list), its own ids and random stream.
func generator(seed uint64, tenants int, month time.Time, w, share int, ordered bool) *billingtest.Generator {
	g := billingtest.NewGenerator(seed, tenants, month, fmt.Sprintf("bench-s%d-w%d", seed, w))
	g.Reseed(seed*1000 + uint64(w) + 1)
	if ordered {
		g.Step = month.AddDate(0, 1, 0).Sub(month) / time.Duration(share+1)
	}
	return g
}

// encoded holds each worker's batches in the binary usage form (api.AppendUsageBatch), as
// gpuserverd sends them, made before the clock starts: making records is the daemons' work, on
// their own machines; reading them is the apiserver's.
var encoded [][][]byte

// encodeAll encodes every worker's share, in parallel.
func encodeAll(seed uint64, tenants int, month time.Time, count, workers, batch int, ordered bool) {
	t0 := time.Now()
	encoded = make([][][]byte, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			share := shareOf(count, workers, w)
			g := generator(seed, tenants, month, w, share, ordered)
			for share > 0 {
				n := min(batch, share)
				encoded[w] = append(encoded[w], api.AppendUsageBatch(nil, g.Batch(n).Records))
				share -= n
			}
		}(w)
	}
	wg.Wait()
	fmt.Printf("encoded %d records in the binary usage form in %s (not timed)\n", count, time.Since(t0).Round(time.Millisecond))
}

func shareOf(count, workers, w int) int {
	share := count / workers
	if w < count%workers {
		share++
	}
	return share
}

// records returns worker w's source of batches: decoding its encoded batches (wire), or
// generating them.
func records(seed uint64, tenants int, month time.Time, w, share, batch int, ordered, wire bool) func() (api.UsageBatch, error) {
	if wire {
		bodies := encoded[w]
		return func() (api.UsageBatch, error) {
			body := bodies[0]
			bodies[0] = nil // the decoded records hold no reference to it
			bodies = bodies[1:]
			return api.DecodeUsageBatch(body)
		}
	}
	g := generator(seed, tenants, month, w, share, ordered)
	return func() (api.UsageBatch, error) {
		n := min(batch, share)
		share -= n
		return g.Batch(n), nil
	}
}
