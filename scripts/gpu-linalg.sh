#!/usr/bin/env bash
# gpu-linalg.sh: torch.linalg (solve, inv, cholesky, qr, eigh, svd; fp64 and fp32; one matrix and
# a batch) with the stock PyTorch of the GPU machine, natively and through gpucloud over shared
# memory (gpucloud's libcusolver.so.12 in the guest, NVIDIA's in the worker), then the two runs'
# results compared (scripts/torch-linalg-check.py: 1e-4 relative in fp64, 1e-3 in fp32). It runs
# gpu-torch.sh's case linalg_check in its modes native and shm, from a bundle made by
# scripts/torch-prep.sh DEST:
#
#   bash DEST/scripts/gpu-linalg.sh            results in $OUT (default ./linalg-out)
#
# The exit status is the comparison's: 0 when every result equals native's within tolerance.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export OUT=${OUT:-$PWD/linalg-out}
mkdir -p "$OUT"
export LINALG_SAVE_DIR=$OUT
MODES=${MODES:-native shm} CASES=linalg_check bash "$ROOT/scripts/gpu-torch.sh"
printf '\n== native against shared memory\n'
python3 "$ROOT/scripts/torch-linalg-check.py" compare "$OUT/linalg-native.pt" "$OUT/linalg-shm.pt" | tee "$OUT/linalg-compare.md"
