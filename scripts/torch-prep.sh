#!/usr/bin/env bash
# torch-prep.sh DEST: builds here (with Go) what scripts/gpu-torch.sh needs on the GPU machine and
# copies a self-contained bundle to DEST: bin/gpuserverd, bin/gputoken, the guest library
# (libcuda.so.1), the loader auditor, gpucloud's libcudnn.so.9, libcusolver.so.12,
# libcusparse.so.12, libcufft.so.12, libcurand.so.10, libnvjpeg.so.13, NPP's eleven libraries
# (libnppc.so.13 ... libnpps.so.13), libnvidia-ml.so.1 and
# libnccl.so.2 (none needs
# an NVIDIA header: built here), the sources of gpucloud's libcudart, libcublas and libcublasLt
# (built there against the toolkit's headers, which check every signature), and the PyTorch cases.
# Then, on the GPU machine: bash DEST/scripts/gpu-torch.sh (or gpu-samples.sh, gpu-linalg.sh,
# gpu-migration.sh, which also runs bin/cuda.test)
#
# CUDA_HEADERS=DIR (a toolkit's include folder) also builds those three here against it first, so
# a bundle that would not build there is refused here.
set -euo pipefail
[[ $# -eq 1 ]] || { echo "usage: $0 DEST" >&2; exit 2; }
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest=$1
cd "$ROOT"
export CGO_ENABLED=1
mkdir -p bin
go build -ldflags="-s -w" -o bin/ ./cmd/gputoken ./cmd/gpuserverd # no symbols: the bundle travels under a size limit
go test -c -o bin/cuda.test ./gpuserverd/backend/cuda # the backend's GPU tests (gpu-migration.sh runs them)
make -s -C gpuserverd/guest
make -s -C gpuserverd/guest/loader
make -s -C gpuserverd/guest/cudnn LIBDIRS=-L"$ROOT/gpuserverd/guest/build"
make -s -C gpuserverd/guest/nvml
# The libraries over libcuda.so.1 that need no NVIDIA header (built here).
for d in cusolver cusparse cufft curand nvjpeg nccl; do make -s -C gpuserverd/guest/$d LIBDIRS=-L"$ROOT/gpuserverd/guest/build"; done
make -s -j2 -C gpuserverd/guest/npp LIBDIRS=-L"$ROOT/gpuserverd/guest/build" CFLAGS="-O2 -Wall -Wextra" # no -g: 11 libraries travel
if [[ -n ${CUDA_HEADERS:-} ]]; then
	chk=$(mktemp -d)
	trap 'rm -rf "$chk"' EXIT
	link=(LIBDIRS=-L"$ROOT/gpuserverd/guest/build")
	make -s -C gpuserverd/guest/cublas BUILD="$chk/cublas" INC=-I"$CUDA_HEADERS" "${link[@]}"
	make -s -C gpuserverd/guest/cublaslt BUILD="$chk/cublaslt" INC=-I"$CUDA_HEADERS" "${link[@]}"
	ln -s "$CUDA_HEADERS" "$chk/include" # cudart's Makefile takes CUDA_HOME/include
	make -s -C gpuserverd/guest/cudart BUILD="$chk/cudart" CUDA_HOME="$chk" \
		CFLAGS="-O2 -g -Wall -Wextra -L$ROOT/gpuserverd/guest/build"
	echo "libcublas, libcublasLt, libcudart build against $CUDA_HEADERS"
fi
rm -rf "$dest"
g=$dest/gpuserverd/guest
mkdir -p "$dest/bin" "$dest/scripts" "$g"
cp scripts/gpu-torch.sh scripts/gpu-samples.sh scripts/samples-runner.py "$dest/scripts/"
mkdir -p "$dest/scripts/lib" && cp scripts/lib/gclib.sh "$dest/scripts/lib/"
cp scripts/gpu-linalg.sh scripts/torch-linalg-check.py scripts/gpu-migration.sh "$dest/scripts/"
cp bin/gpuserverd bin/gputoken bin/cuda.test "$dest/bin/"
# The whole guest tree (2 MB of sources), less its tests and build outputs; the prebuilt parts after.
tar -C gpuserverd/guest --exclude=build --exclude=guesttest -cf - . | tar -C "$g" -xf -
for d in . loader cudnn nvml nccl cusolver cusparse cufft curand nvjpeg npp; do mkdir -p "$g/$d/build" && cp -a "gpuserverd/guest/$d/build/." "$g/$d/build/"; done
# The three built here against CUDA_HEADERS: gpu-torch.sh takes them (PREBUILT=1) instead of
# building them there, which saves the GPU machine's time.
if [[ -n ${CUDA_HEADERS:-} ]]; then
	mkdir -p "$dest/prebuilt"
	cp "$chk/cudart/libcudart.so.13" "$chk/cublas/libcublas.so.13" "$chk/cublaslt/libcublasLt.so.13" "$dest/prebuilt/"
fi
du -sh "$dest"
