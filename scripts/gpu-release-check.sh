#!/usr/bin/env bash
# gpu-release-check.sh BUNDLE: the lead's one end-of-session run on the GPU machine, so that the
# figures the docs quote come from one call on one card:
#   1. the launch path (scripts/gpu-launch.sh: gpubench's launch rows and pinned 64 MiB copies,
#      native against this tree's gpuserverd + guest libcuda.so.1 over shared memory, interleaved);
#   2. stock PyTorch natively and through gpucloud (scripts/gpu-torch.sh: correctness cases
#      including torch.linalg / torch.fft / sparse on the remoted cuSOLVER, cuFFT and cuSPARSE, and
#      the ResNet-50 / GPT-2 / batch-1 benchmarks) over shm, ivshmem and TCP.
# BUNDLE is made here with
#   scripts/gpu-launch-prep.sh BUNDLE/launch main=.
#   CUDA_HEADERS=<toolkit include dir> scripts/torch-prep.sh BUNDLE/torch
# Environment: OUT (results), TORCH_SECONDS (the torch part's limit, default 420), and
# gpu-torch.sh's own (MODES, CASES, BENCH_REPS ...).
set -uo pipefail
BUNDLE=$(cd "${1:?BUNDLE}" && pwd)
OUT=${OUT:-$PWD/release-check}
mkdir -p "$OUT"
echo "== launch path ($(date -u +%T))"
BUNDLE=$BUNDLE/launch ROUNDS=${ROUNDS:-5} OUT=/tmp/launch timeout 90 bash "$BUNDLE/launch/gpu-launch.sh" main 2>&1 | tee "$OUT/launch.txt" | tail -25
echo "== PyTorch ($(date -u +%T))"
export PATH=/opt/torch/.venv/bin:$PATH
OUT=$OUT/torch PREBUILT=1 timeout "${TORCH_SECONDS:-420}" bash "$BUNDLE/torch/scripts/gpu-torch.sh" > "$OUT/torch.log" 2>&1
echo "torch rc=$?"
tail -60 "$OUT/torch.log"
