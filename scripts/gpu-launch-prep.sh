#!/usr/bin/env bash
# gpu-launch-prep.sh DEST NAME=COMMIT...: the bundle scripts/gpu-launch.sh runs on the GPU
# machine. Per NAME, gpuserverd and the guest libcuda.so.1 built from COMMIT ("." for the
# working tree), xz-packed (NAME.tar.xz); gputoken and gpubench's sources from the working tree.
# Example: scripts/gpu-launch-prep.sh /work/main/.devcarry/me old=38ddf02 new=HEAD fix=.
set -euo pipefail
DEST=${1:?DEST}
shift
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$DEST"
DEST=$(cd "$DEST" && pwd)
export CGO_ENABLED=1
(cd "$ROOT" && go build -ldflags='-s -w' -o "$DEST/gputoken" ./cmd/gputoken)
mkdir -p "$DEST/gputests"
cp "$ROOT"/gpuserverd/guest/gputests/{Makefile,gpubench.c,pinbench.c,common.h,kernels.cu} "$DEST/gputests/"
cp "$ROOT"/scripts/{gpu-launch.sh,gpu-pinned.sh} "$DEST/"
for spec in "$@"; do
	name=${spec%%=*} commit=${spec#*=}
	src=$ROOT
	if [[ $commit != . ]]; then
		src=$(mktemp -d)
		git -C "$ROOT" archive "$commit" | tar -x -C "$src"
	fi
	stage=$(mktemp -d)
	mkdir -p "$stage/$name"
	(cd "$src" && go build -ldflags='-s -w' -o "$stage/$name/gpuserverd" ./cmd/gpuserverd)
	make -s -C "$src/gpuserverd/guest" BUILD="$stage/$name" >/dev/null
	tar -cJf "$DEST/$name.tar.xz" -C "$stage" "$name/gpuserverd" "$name/libcuda.so.1"
	rm -rf "$stage"
	[[ $commit != . ]] && rm -rf "$src"
	echo "$name: $commit ($(git -C "$ROOT" rev-parse --short "${commit/#./HEAD}")$([[ $commit == . ]] && echo ' + working tree'))"
done
du -sh "$DEST"
