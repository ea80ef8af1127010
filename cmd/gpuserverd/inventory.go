package main

import (
	"log/slog"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"gpucloud/api"
	"gpucloud/gpuserverd/inventory"
)

// nvmlInventory returns the heartbeat's GPU reader for the cuda backend: NVML's names, memory and
// health. Without NVML (or on the simulated backend) it returns nil and heartbeats report the
// backend's devices. NVML and the CUDA driver name a GPU by the same UUID, which is what the
// apiserver reserves and what session tokens carry.
func nvmlInventory(kind string, log *slog.Logger) func() ([]api.GPUInfo, error) {
	if kind != "cuda" {
		return nil
	}
	inv, err := inventory.Open(nvml.New())
	if err != nil {
		log.Warn("no NVML inventory; heartbeats report the CUDA driver's devices", "err", err)
		return nil
	}
	return inv.Infos
}
