package main

import (
	"testing"

	"github.com/google/uuid"

	"gpucloud/apiserver/store"
)

// The seeded VM-hour price is the quote less the GPUs (or slice) and the root disk, so an hour
// held costs exactly the quote.
func TestVMHourPriceCompletesTheQuote(t *testing.T) {
	m := uuid.New()
	for _, c := range []struct {
		it   store.InstanceType
		want int64
	}{
		{store.InstanceType{PricePerHour: 45, DiskGiB: 40, GPUModelID: &m, GPUCount: 1, Tier: "shared"}, 450_000 - 40*100 - 10*30_000},
		{store.InstanceType{PricePerHour: 300, DiskGiB: 100, GPUModelID: &m, GPUCount: 1, Tier: "dedicated"}, 3_000_000 - 100*100 - 2_500_000},
		{store.InstanceType{PricePerHour: 2, DiskGiB: 10, Tier: "dedicated"}, 20_000 - 10*100},
		{store.InstanceType{PricePerHour: 1, DiskGiB: 10, GPUCount: 1, Tier: "dedicated"}, 0}, // never negative
	} {
		if got := vmHourMicros(c.it, 10<<30); got != c.want {
			t.Errorf("%+v: %d, want %d", c.it, got, c.want)
		}
	}
}
