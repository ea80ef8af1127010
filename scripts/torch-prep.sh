#!/usr/bin/env bash
# torch-prep.sh DEST: builds here (with Go) what scripts/gpu-torch.sh needs on the GPU machine and
# copies a self-contained bundle to DEST: bin/gpuserverd, bin/gputoken, the guest library
# (gpuserverd/guest/build/libcuda.so.1), the loader auditor (gpuserverd/guest/loader/build), the
# sources of gpucloud's libcudart and libcublas (built there against the toolkit's headers), and
# the PyTorch cases. Then, on the GPU machine: bash DEST/scripts/gpu-torch.sh
set -euo pipefail
[[ $# -eq 1 ]] || { echo "usage: $0 DEST" >&2; exit 2; }
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest=$1
cd "$ROOT"
export CGO_ENABLED=1
mkdir -p bin
go build -o bin/ ./cmd/gputoken ./cmd/gpuserverd
make -s -C gpuserverd/guest
make -s -C gpuserverd/guest/loader
rm -rf "$dest"
g=$dest/gpuserverd/guest
mkdir -p "$dest/bin" "$g/include" "$g/gputests"
mkdir -p "$dest/scripts" && cp scripts/gpu-torch.sh "$dest/scripts/"
cp bin/gpuserverd bin/gputoken "$dest/bin/"
cp -r gpuserverd/guest/build gpuserverd/guest/loader gpuserverd/guest/cudart gpuserverd/guest/cublas "$g/"
rm -rf "$g/cudart/build" "$g/cublas/build"
cp gpuserverd/guest/wire_gen.c gpuserverd/guest/wire_gen.h "$g/"
cp gpuserverd/guest/include/gpucloud_private.h "$g/include/"
cp -r gpuserverd/guest/gputests/torch "$g/gputests/"
du -sh "$dest"
