package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"gpucloud/apiserver/store"
	"gpucloud/billing/rating"
)

// Demo prices, in micro-units of USD per unit-hour. An instance type's VM-hour price is what is
// left of its quoted price_per_hour after its GPUs (or slice) and its root disk, so the console's
// quote at create is exactly what an hour of holding the instance is billed.
const (
	demoGPUHourMicros        = 2_500_000 // a dedicated GPU, any model
	demoSliceGiBHourMicros   = 30_000    // a GiB of shared-slice memory quota
	demoStorageGiBHourMicros = 100       // a GiB of disk (about 0.07 a GiB-month)
)

// demoPricesFrom is when the demo price book takes effect: a fixed past hour, so seeding again
// (a restarted stack) finds its entries already there.
var demoPricesFrom = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

// seedPriceBook gives every instance type of the catalog the prices its usage is rated by (GPU-hour
// per model and tier, GiB-hour for slices, VM-hour, storage GiB-hour), so the demo's costs are real
// numbers end to end. Entries already there are kept: it runs whenever the catalog grows.
func seedPriceBook(ctx context.Context, st *store.Store) error {
	book := rating.NewBook(st.Pool)
	types, err := st.ListInstanceTypes(ctx, uuid.Nil, 1000)
	if err != nil {
		return fmt.Errorf("price book: %w", err)
	}
	models, err := st.ListGPUModels(ctx)
	if err != nil {
		return fmt.Errorf("price book: %w", err)
	}
	modelName := map[uuid.UUID]string{}
	for _, m := range models {
		modelName[m.ID] = m.Name
	}
	var sliceBytes int64
	if err := st.Pool.QueryRow(ctx, `SELECT coalesce(memory_slice_bytes, 0) FROM tiers WHERE name = 'shared'`).Scan(&sliceBytes); err != nil {
		return fmt.Errorf("price book: shared slice: %w", err)
	}
	prices := []rating.Price{{Kind: "storage", UnitPriceMicros: demoStorageGiBHourMicros}}
	for _, m := range models {
		prices = append(prices,
			rating.Price{Kind: "gpu", GPUModel: m.Name, Tier: "dedicated", UnitPriceMicros: demoGPUHourMicros},
			rating.Price{Kind: "gpu", GPUModel: m.Name, Tier: "shared", UnitPriceMicros: demoSliceGiBHourMicros})
	}
	for _, it := range types {
		prices = append(prices, rating.Price{Kind: "vm", InstanceType: it.Name, UnitPriceMicros: vmHourMicros(it, sliceBytes)})
	}
	for _, p := range prices {
		p.EffectiveFrom = demoPricesFrom
		if _, err := book.Add(ctx, p); err != nil && !errors.Is(err, rating.ErrPriceExists) {
			return fmt.Errorf("price book: %s %s%s: %w", p.Kind, p.GPUModel, p.InstanceType, err)
		}
	}
	return nil
}

// vmHourMicros is the instance type's quoted hourly price (cents) less its GPUs and root disk,
// never below zero.
func vmHourMicros(it store.InstanceType, sliceBytes int64) int64 {
	rest := it.PricePerHour*10_000 - int64(it.DiskGiB)*demoStorageGiBHourMicros
	if it.GPUCount > 0 {
		if it.Tier == "shared" {
			rest -= (int64(it.GPUCount) * sliceBytes >> 30) * demoSliceGiBHourMicros
		} else {
			rest -= int64(it.GPUCount) * demoGPUHourMicros
		}
	}
	return max(rest, 0)
}
