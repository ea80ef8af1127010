package cli

import (
	"context"
	"github.com/spf13/cobra"

	"gpucloud/sdk"
)

var modelCols = []column[sdk.GPUModel]{
	col("ID", func(m sdk.GPUModel) string { return m.ID }), col("NAME", func(m sdk.GPUModel) string { return m.Name }),
	col("MEMORY", func(m sdk.GPUModel) string { return gib(m.MemoryBytes) }), col("NVML MATCH", func(m sdk.GPUModel) string { return m.NVMLMatch }),
}

func (a *app) gpuModelsCmd() *cobra.Command {
	c := &cobra.Command{Use: "gpu-models", Short: "GPU models of the catalog"}
	c.AddCommand(listCmd(a, "List GPU models", (*sdk.Client).ListGPUModels, modelCols))
	c.AddCommand(oneCmd(a, "get MODEL_ID", "Show a GPU model", "a GPU model id", (*sdk.Client).GetGPUModel, modelCols))
	var req sdk.CreateGPUModelRequest
	create := oneCmd(a, "create NAME", "Add a GPU model (operator)", "a model name", func(cl *sdk.Client, ctx context.Context, arg string) (sdk.GPUModel, error) {
		req.Name = arg
		return cl.CreateGPUModel(ctx, req)
	}, modelCols)
	create.Flags().Int64Var(&req.MemoryBytes, "memory-bytes", 0, "memory per GPU in bytes")
	create.Flags().StringVar(&req.NVMLMatch, "nvml-match", "", "substring of the NVML product name that identifies the model")
	c.AddCommand(create)
	return c
}

func (a *app) tiersCmd() *cobra.Command {
	cols := []column[sdk.Tier]{col("NAME", func(t sdk.Tier) string { return t.Name }), col("MEMORY SLICE", func(t sdk.Tier) string {
		if t.MemorySliceBytes == nil {
			return "whole GPU"
		}
		return gib(*t.MemorySliceBytes)
	})}
	c := &cobra.Command{Use: "tiers", Short: "Tiers: dedicated GPUs or shared slices"}
	c.AddCommand(listCmd(a, "List tiers", (*sdk.Client).ListTiers, cols))
	var slice int64
	set := &cobra.Command{Use: "set-shared", Short: "Set the shared tier's GPU memory slice (operator)", Args: exactArgs(0, "no arguments"),
		RunE: a.with(func(cmd *cobra.Command, cl *sdk.Client, _ []string) error {
			t, err := cl.SetSharedTier(cmd.Context(), slice)
			if err != nil {
				return err
			}
			return printOne(a.io.Out, a.output, t, cols)
		})}
	set.Flags().Int64Var(&slice, "memory-slice-bytes", 0, "GPU memory per shared instance, in bytes")
	_ = set.MarkFlagRequired("memory-slice-bytes")
	c.AddCommand(set)
	return c
}

var typeCols = []column[sdk.InstanceType]{
	col("ID", func(t sdk.InstanceType) string { return t.ID }), col("NAME", func(t sdk.InstanceType) string { return t.Name }),
	col("VCPUS", func(t sdk.InstanceType) string { return itoa(t.VCPUs) }),
	col("MEMORY", func(t sdk.InstanceType) string { return itoa(t.MemoryMiB) + "MiB" }),
	col("DISK", func(t sdk.InstanceType) string { return itoa(t.DiskGiB) + "GiB" }),
	col("GPUS", func(t sdk.InstanceType) string { return itoa(t.GPUCount) }), col("TIER", func(t sdk.InstanceType) string { return t.Tier }),
	col("PRICE/HOUR", func(t sdk.InstanceType) string { return money(t.PricePerHour, t.Currency) }),
}

func (a *app) instanceTypesCmd() *cobra.Command {
	c := &cobra.Command{Use: "instance-types", Aliases: []string{"types"}, Short: "Instance types with their hourly prices"}
	c.AddCommand(listCmd(a, "List instance types", collected((*sdk.Client).InstanceTypes), typeCols))
	c.AddCommand(oneCmd(a, "get TYPE_ID", "Show an instance type", "an instance type id", (*sdk.Client).GetInstanceType, typeCols))
	var req sdk.CreateInstanceTypeRequest
	create := oneCmd(a, "create NAME", "Add an instance type (operator)", "a type name", func(cl *sdk.Client, ctx context.Context, arg string) (sdk.InstanceType, error) {
		req.Name = arg
		return cl.CreateInstanceType(ctx, req)
	}, typeCols)
	f := create.Flags()
	f.IntVar(&req.VCPUs, "vcpus", 0, "virtual CPUs")
	f.IntVar(&req.MemoryMiB, "memory-mib", 0, "memory in MiB")
	f.IntVar(&req.DiskGiB, "disk-gib", 0, "disk in GiB")
	f.StringVar(&req.GPUModelID, "gpu-model", "", "GPU model id (with --gpus)")
	f.IntVar(&req.GPUCount, "gpus", 0, "GPUs")
	f.StringVar(&req.Tier, "tier", "dedicated", "dedicated or shared")
	f.Int64Var(&req.PricePerHour, "price-per-hour", 0, "hourly price in minor units (cents)")
	f.StringVar(&req.Currency, "currency", "", "ISO 4217 currency (default USD)")
	c.AddCommand(create)
	return c
}
