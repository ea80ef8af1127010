#!/usr/bin/env bash
# mathlibs-prep.sh DEST: builds here (with Go, and the CUDA toolkit's headers for gpucloud's
# libcudart, libcublas and libcublasLt) the bundle scripts/gpu-mathlibs.sh runs on the GPU machine:
# bin/gpuserverd, bin/gputoken, lib/ (what /usr/lib/gpucloud holds in a VM: the guest libcuda.so.1,
# libcudart.so.13, libcublas.so.13, libcublasLt.so.13, libcudnn.so.9, libnvidia-ml.so.1,
# libcusparse.so.12, libcufft.so.12, libcurand.so.10) and the loader auditor, the scripts and the
# cuRAND sample's source. Then, on the GPU machine: bash DEST/scripts/gpu-mathlibs.sh
#
# CUDA_HEADERS=DIR: a CUDA 13 toolkit's include folder (default /work/cuda-headers/toolkit).
set -euo pipefail
[[ $# -eq 1 ]] || { echo "usage: $0 DEST" >&2; exit 2; }
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest=$1 hdr=${CUDA_HEADERS:-/work/cuda-headers/toolkit}
cd "$ROOT"
g=gpuserverd/guest
rm -rf "$dest"
mkdir -p "$dest/bin" "$dest/lib" "$dest/scripts" "$dest/src"
CGO_ENABLED=1 go build -ldflags='-s -w' -o "$dest/bin/" ./cmd/gputoken ./cmd/gpuserverd
b=$(mktemp -d)
trap 'rm -rf "$b"' EXIT
link=LIBDIRS=-L$b
make -s -C $g BUILD="$b"
make -s -C $g/loader BUILD="$b"
make -s -C $g/nvml BUILD="$b"
make -s -C $g/cudnn BUILD="$b" "$link"
for d in cusparse cufft curand; do make -s -C $g/$d BUILD="$b" "$link"; done
make -s -C $g/cublas BUILD="$b" INC=-I"$hdr" "$link"
make -s -C $g/cublaslt BUILD="$b" INC=-I"$hdr" "$link"
ln -s "$hdr" "$b/include" # cudart's Makefile takes CUDA_HOME/include
make -s -C $g/cudart BUILD="$b" CUDA_HOME="$b" CFLAGS="-O2 -g -Wall -Wextra -L$b"
for f in libcuda.so.1 libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libnvidia-ml.so.1 \
	libcusparse.so.12 libcufft.so.12 libcurand.so.10 libgpucloud-audit.so; do
	cp "$b/$f" "$dest/lib/" && strip -g "$dest/lib/$f"
done
cp scripts/gpu-mathlibs.sh scripts/torch-fft-sparse-check.py "$dest/scripts/"
cp $g/gputests/curand_sample.c "$dest/src/"
du -sh "$dest"
