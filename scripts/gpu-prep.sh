#!/usr/bin/env bash
# gpu-prep.sh [DEST]: builds, on a machine with Go, everything scripts/gpu-run.sh uses on the GPU
# machine (which has nvcc but no Go): bin/gpuserverd, bin/gputoken, the cuda backend's and the
# inventory's test binaries, and the guest library when its sources are present. With DEST, also
# copies a self-contained bundle there (scripts/, bin/, the test programs' sources, the guest
# library) to run as: bash DEST/scripts/gpu-run.sh
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export CGO_ENABLED=1 # the cuda backend is cgo; binaries link glibc dynamically
mkdir -p bin
go build -o bin/ ./cmd/gputoken
if [[ -d cmd/gpuserverd ]]; then go build -o bin/ ./cmd/gpuserverd; fi
go test -c -o bin/cuda.test ./gpuserverd/backend/cuda
go test -c -o bin/inventory.test ./gpuserverd/inventory
if [[ -f gpuserverd/guest/Makefile ]]; then make -s -C gpuserverd/guest; fi
if [[ $# -gt 0 ]]; then
	dest=$1
	rm -rf "$dest"
	mkdir -p "$dest/gpuserverd/guest"
	cp -r scripts bin "$dest/"
	cp -r gpuserverd/guest/gputests "$dest/gpuserverd/guest/"
	if [[ -d gpuserverd/guest/cudart ]]; then cp -r gpuserverd/guest/cudart "$dest/gpuserverd/guest/"; fi
	if [[ -d gpuserverd/guest/build ]]; then cp -r gpuserverd/guest/build "$dest/gpuserverd/guest/"; fi
	if [[ -d gpuserverd/guest/cublas ]]; then # built there against the toolkit, with our wire code
		cp -r gpuserverd/guest/cublas gpuserverd/guest/wire_gen.c gpuserverd/guest/wire_gen.h "$dest/gpuserverd/guest/"
		mkdir -p "$dest/gpuserverd/guest/include"
		cp gpuserverd/guest/include/gpucloud_private.h "$dest/gpuserverd/guest/include/"
	fi
	du -sh "$dest"
fi
