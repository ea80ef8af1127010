#!/usr/bin/env bash
# gpu-pinned.sh: where a pinned 64 MiB copy over shared memory loses against native, on a GPU.
# First pinbench (gpuserverd/guest/gputests/pinbench.c): native copies from host memory of the
# kinds the worker's arena can be (a memfd registered with the driver, with and without huge
# pages) against cuMemAllocHost's, several ways each (sync, async, split over streams, as a
# device-to-device copy of the mapped address, by a kernel). Then scripts/gpu-launch.sh: gpubench
# natively and through each named build over shared memory, interleaved, with each session's
# copy rows and how physically contiguous its pinned buffer was.
#
# Usage, on the GPU machine:  BUNDLE=dir [ROUNDS=5] [OUT=dir] [TUNE=1] bash gpu-pinned.sh [NAME[,VAR=VALUE]...]
# BUNDLE as gpu-launch.sh's (scripts/gpu-launch-prep.sh). TUNE=1 (the default) lets pinbench's
# memfd kinds have huge pages while it runs (shmem transparent huge pages on advice, 64 reserved
# 2 MiB pages) and puts both settings back after it.
set -uo pipefail
BUNDLE=${BUNDLE:?BUNDLE: the prepared folder}
BUNDLE=$(cd "$BUNDLE" && pwd)
OUT=${OUT:-/tmp/gpu-pinned}
B=$OUT/build
mkdir -p "$B"
nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader
echo "kernel $(uname -r), $(nproc) cores"
make -s -C "$BUNDLE/gputests" BUILD="$B" "$B/pinbench" "$B/kernels.ptx" || { echo "build failed"; exit 1; }

THP=/sys/kernel/mm/transparent_hugepage/shmem_enabled HUGE=/proc/sys/vm/nr_hugepages
thp_was=$(sed -n 's/.*\[\(.*\)\].*/\1/p' "$THP" 2>/dev/null) huge_was=$(cat "$HUGE" 2>/dev/null)
if [[ ${TUNE:-1} == 1 ]]; then
	{ echo advise >"$THP"; } 2>/dev/null || echo "pinbench: shmem huge pages stay $thp_was"
	{ echo 64 >"$HUGE"; } 2>/dev/null || echo "pinbench: no reserved huge pages"
fi
(cd "$B" && timeout 120 ./pinbench kernels.ptx 64 "${PIN_ROUNDS:-7}" "${PIN_REPS:-15}") | tee "$OUT/pinbench.txt"
status=${PIPESTATUS[0]}
if [[ ${TUNE:-1} == 1 ]]; then
	[[ -n $thp_was ]] && { echo "$thp_was" >"$THP"; } 2>/dev/null
	[[ -n $huge_was ]] && { echo "$huge_was" >"$HUGE"; } 2>/dev/null
	echo "put back: shmem huge pages $(sed -n 's/.*\[\(.*\)\].*/\1/p' "$THP" 2>/dev/null), reserved huge pages $(cat "$HUGE" 2>/dev/null)"
fi

[[ $# -gt 0 ]] || exit "$status"
OUT=$OUT/launch ROUNDS=${ROUNDS:-5} bash "$BUNDLE/gpu-launch.sh" "$@" || status=1
exit "$status"
