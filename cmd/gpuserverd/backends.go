package main

// The GPU backends this binary can run. The real CUDA backend joins this list as
// _ "gpucloud/gpuserverd/backend/cuda".
import (
	_ "gpucloud/gpuserverd/backend/sim"
)
