package main

// The GPU backends this binary can run: the real one (the CUDA driver loaded at run time) and the
// simulated test double. --backend auto prefers cuda and never falls back silently on a GPU machine.
import (
	_ "gpucloud/gpuserverd/backend/cuda"
	_ "gpucloud/gpuserverd/backend/sim"
)
