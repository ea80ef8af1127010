package main

import (
	"log/slog"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"gpucloud/api"
	"gpucloud/gpuserverd/inventory"
	"gpucloud/gpuserverd/server"
)

// openInventory opens NVML for the cuda backend: the heartbeat's names, memory and health, and
// the readings guests' NVML is answered from. Without NVML (or on the simulated backend) it
// returns nil: heartbeats report the backend's devices, guests get no readings. NVML and the CUDA
// driver name a GPU by the same UUID, which is what the apiserver reserves and what session
// tokens carry.
func openInventory(kind string, log *slog.Logger) *inventory.Inventory {
	if kind != "cuda" {
		return nil
	}
	inv, err := inventory.Open(nvml.New())
	if err != nil {
		log.Warn("no NVML inventory; heartbeats report the CUDA driver's devices and guests' NVML gets no readings", "err", err)
		return nil
	}
	return inv
}

// heartbeatInventory is the heartbeat's GPU reader, nil without NVML.
func heartbeatInventory(inv *inventory.Inventory) func() ([]api.GPUInfo, error) {
	if inv == nil {
		return nil
	}
	return inv.Infos
}

// nvmlMonitor is what guests' NVML is answered from, nil without NVML (the server then uses the
// backend's devices, or simulated readings on the simulated backend).
func nvmlMonitor(inv *inventory.Inventory, log *slog.Logger) *server.Monitor {
	if inv == nil {
		return nil
	}
	v, err := inv.DriverVersion()
	if err != nil {
		log.Warn("NVML driver version", "err", err)
	}
	return &server.Monitor{DriverVersion: v, Read: inv.Read}
}
