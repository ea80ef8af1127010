package sdk_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"gpucloud/sdk"
)

// A tenant creates a GPU instance, waits for it to run, and lists what it has.
func Example() {
	ctx := context.Background()
	c, err := sdk.New("https://api.example.com", os.Getenv("GPUCLOUD_API_KEY"))
	if err != nil {
		panic(err)
	}
	inst, err := c.CreateInstance(ctx, sdk.CreateInstanceRequest{Name: "train-1", InstanceTypeID: "TYPE-ID", Image: "ubuntu-24.04"})
	if ae, ok := sdk.AsAPIError(err); ok && sdk.IsValidation(err) {
		for _, f := range ae.Fields {
			fmt.Println(f.Field, f.Reason)
		}
		return
	}
	if inst, err = c.WaitInstance(ctx, inst.ID, 2*time.Second, nil, sdk.StateRunning); err != nil {
		panic(err)
	}
	for i, err := range c.Instances(ctx, sdk.InstanceFilter{}) {
		if err != nil {
			panic(err)
		}
		fmt.Println(i.Name, i.State)
	}
}

// Finance's month end: close every ended month that still has open usage, and keep each
// invoice's lines as CSV.
func ExampleClient_ClosePeriod() {
	ctx := context.Background()
	c, err := sdk.New("https://api.example.com", os.Getenv("GPUCLOUD_API_KEY"))
	if err != nil {
		panic(err)
	}
	for p, err := range c.Periods(ctx, sdk.PeriodFilter{Status: sdk.PeriodOpen}) {
		if err != nil {
			panic(err)
		}
		if !p.Ended {
			continue
		}
		inv, err := c.ClosePeriod(ctx, p.TenantID, p.Period)
		if ae, ok := sdk.AsAPIError(err); ok && ae.Type == "usage-unpriced" {
			fmt.Println("add a price first:", ae.Detail)
			continue
		}
		if err != nil {
			panic(err)
		}
		lines, err := c.GetInvoiceCSV(ctx, inv.ID)
		if err != nil {
			panic(err)
		}
		_ = os.WriteFile("invoice-"+inv.ID+".csv", lines, 0o600)
	}
}
