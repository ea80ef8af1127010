#!/usr/bin/env bash
# multigpu-prep.sh DEST: builds here (Go and the guest libraries; gpucloud's libcudart, libcublas
# and libcublasLt against CUDA_HEADERS, default /work/cuda-headers/toolkit) everything that
# scripts/gpu-multigpu.sh needs on a GPU machine, and copies it to DEST as one folder:
#   bin/gpuserverd, bin/gputoken, bin/allreduce_perf (built against gpucloud's cuda.h and nccl.h),
#   lib/ (what /usr/lib/gpucloud holds in a VM: libcuda.so.1, libnccl.so.2, libcudart.so.13,
#   libcublas.so.13, libcublasLt.so.13, libcudnn.so.9, libnvidia-ml.so.1), libgpucloud-audit.so,
#   scripts/gpu-multigpu.sh and ddp_check.py.
# Then, on the GPU machine: bash DEST/scripts/gpu-multigpu.sh
set -euo pipefail
[[ $# -eq 1 ]] || { echo "usage: $0 DEST" >&2; exit 2; }
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest=$1
CUDA_HEADERS=${CUDA_HEADERS:-/work/cuda-headers/toolkit}
cd "$ROOT"
export CGO_ENABLED=1
g=gpuserverd/guest
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
go build -ldflags "-s -w" -o "$w/bin/" ./cmd/gputoken ./cmd/gpuserverd
make -s -C $g
make -s -C $g/loader
link=(LIBDIRS=-L"$ROOT/$g/build")
make -s -C $g/nccl BUILD="$w/nccl" "${link[@]}"
make -s -C $g/cudnn "${link[@]}"
make -s -C $g/nvml
make -s -C $g/cublas BUILD="$w/cublas" INC=-I"$CUDA_HEADERS" "${link[@]}"
make -s -C $g/cublaslt BUILD="$w/cublaslt" INC=-I"$CUDA_HEADERS" "${link[@]}"
mkdir -p "$w/cuda" && ln -s "$CUDA_HEADERS" "$w/cuda/include" # cudart's Makefile takes CUDA_HOME/include
make -s -C $g/cudart BUILD="$w/cudart" CUDA_HOME="$w/cuda" CFLAGS="-O2 -g -Wall -Wextra -L$ROOT/$g/build"
gcc -O2 -Wall -Wextra -Werror -I$g/nccl -I$g/include -o "$w/bin/allreduce_perf" $g/gputests/multigpu/allreduce_perf.c \
	-L"$w/nccl" -lnccl -L$g/build -lcuda
rm -rf "$dest"
mkdir -p "$dest/bin" "$dest/lib" "$dest/scripts"
cp "$w"/bin/* "$dest/bin/"
cp $g/build/libcuda.so.1 "$w/nccl/libnccl.so.2" "$w/cudart/libcudart.so.13" "$w/cublas/libcublas.so.13" \
	"$w/cublaslt/libcublasLt.so.13" $g/cudnn/build/libcudnn.so.9 $g/nvml/build/libnvidia-ml.so.1 "$dest/lib/"
cp $g/loader/build/libgpucloud-audit.so "$dest/"
cp scripts/gpu-multigpu.sh $g/gputests/multigpu/ddp_check.py "$dest/scripts/"
du -sh "$dest"
