package server

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"gpucloud/gpuserverd/backend"
)

// OpenBackend resolves --backend: "cuda" and "simulated" open that kind; "auto" takes cuda when
// it is registered and sees at least one device. Otherwise, where the machine shows a GPU, auto
// refuses to start (the simulated backend must be asked for by name there); elsewhere it falls
// back to the simulated backend with a loud warning, never silently.
func OpenBackend(kind string, log *slog.Logger) (backend.Backend, error) {
	switch kind {
	case "cuda", "simulated":
		return backend.Open(kind)
	case "auto":
	default:
		return nil, fmt.Errorf("--backend %q: want auto, cuda or simulated", kind)
	}
	var why string
	if b, err := backend.Open("cuda"); err != nil {
		why = err.Error()
	} else if devs, err := b.Devices(); err != nil {
		why = fmt.Sprintf("cuda backend cannot list devices: %v", err)
	} else if len(devs) == 0 {
		why = "cuda backend sees no GPU"
	} else {
		return b, nil
	}
	if gpu := gpuPresent(); gpu != "" {
		return nil, fmt.Errorf("--backend auto: %s exists but the cuda backend cannot use it (%s); "+
			"fix the driver, or pass --backend simulated to run the test double anyway", gpu, why)
	}
	log.Warn("NO GPU BACKEND: falling back to the SIMULATED backend, a test double that runs kernels on the CPU; "+
		"pass --backend cuda on a GPU server", "reason", why)
	return backend.Open("simulated")
}

// gpuPresent names the first sign of an NVIDIA GPU on this machine, "" if none.
var gpuPresent = func() string {
	if m, _ := filepath.Glob("/proc/driver/nvidia/gpus/*"); len(m) > 0 {
		return m[0]
	}
	if _, err := os.Stat("/dev/nvidia0"); err == nil {
		return "/dev/nvidia0"
	}
	return ""
}
