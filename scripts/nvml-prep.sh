#!/usr/bin/env bash
# nvml-prep.sh DEST: bundles, on a machine with Go, what scripts/nvml-run.sh needs on the GPU
# machine: bin/gpuserverd (cuda backend), bin/gputoken, the guest libcuda.so.1 and gpucloud's
# libnvidia-ml.so.1 with nvml_sim_test, in DEST/gpuserverd/guest/build. Then, there:
#   bash DEST/scripts/nvml-run.sh
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest=${1:?usage: nvml-prep.sh DEST}
cd "$ROOT"
rm -rf "$dest"
mkdir -p "$dest/bin" "$dest/scripts" "$dest/gpuserverd/guest/build"
lib=$(cd "$dest/gpuserverd/guest/build" && pwd)
CGO_ENABLED=1 go build -o "$dest/bin/" ./cmd/gpuserverd ./cmd/gputoken
make -s -C gpuserverd/guest BUILD="$lib"
make -s -C gpuserverd/guest/nvml BUILD="$lib"
gcc -O2 -Wall -Wextra -o "$lib/nvml_sim_test" gpuserverd/guest/nvml/nvml_sim_test.c -L"$lib" -lnvidia-ml -ldl -pthread
cp scripts/nvml-run.sh "$dest/scripts/"
du -sh "$dest"
