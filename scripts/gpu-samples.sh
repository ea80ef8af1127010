#!/usr/bin/env bash
# gpu-samples.sh: NVIDIA's public CUDA samples (github.com/NVIDIA/cuda-samples, fetched, not kept in
# this repository) built on the GPU machine and run natively and through gpucloud over shared
# memory and over TCP, side by side (issue 14's check). Run from a torch-prep.sh bundle:
#
#   SAMPLES_TAR=cuda-samples.tar.xz bash DEST/scripts/gpu-samples.sh     results in $OUT
#
# The samples are built for sm_90 with a shared runtime (-DCMAKE_CUDA_RUNTIME_LIBRARY=Shared);
# driver-API samples as they are. Each runs with the arguments of NVIDIA's test_args.json. The
# unmodified binaries load gpucloud's libraries whatever their RUNPATH says, by the guest image's
# mechanism (LD_AUDIT + GPUCLOUD_LIBDIR). One gpuserverd on the cuda backend serves both remote
# modes; one shared-tier token (the instance's) for every session.
# Environment: ONLY (sample names: build and run only these), MODES ("native shm tcp"), T (seconds
# per sample, default 30), JOBS (build parallelism), PREBUILT=1 (see scripts/lib/gclib.sh), SEQ=1 (the
# modes one after another, so that their times compare; each run's whole output in $OUT/logs).
set -uo pipefail
export PATH=$PATH:/usr/local/cuda/bin
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-$PWD/samples-out}
: "${SAMPLES_TAR:?SAMPLES_TAR must name the cuda-samples tarball}"
MODES=${MODES:-native shm tcp}
export T=${T:-30}
W=/tmp/gpu-samples
mkdir -p "$OUT" "$W"
SAMPLES_TAR=$(realpath "$SAMPLES_TAR")
cd "$W" || exit 1
T0=$(date +%s)
. "$ROOT/scripts/lib/gclib.sh"

if [[ ! -f build/build.ninja ]]; then
	rm -rf src build && mkdir src && tar xJf "$SAMPLES_TAR" -C src
	find src -name CMakeLists.txt -exec sed -i 's/set(CMAKE_CUDA_ARCHITECTURES [0-9 ]*)/set(CMAKE_CUDA_ARCHITECTURES 90)/' {} +
	# Samples whose folders the tarball lacks (graphics interop) are left out of the build.
	for f in $(find src -name CMakeLists.txt); do
		d=$(dirname "$f")
		grep -o 'add_subdirectory([A-Za-z0-9_]*)' "$f" | sed 's/add_subdirectory(\(.*\))/\1/' | while read -r s; do
			[[ -d $d/$s ]] || sed -i "s/^\s*add_subdirectory($s)/# &/" "$f"
		done
	done
	cmake -S src -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_RUNTIME_LIBRARY=Shared \
		-DCMAKE_CUDA_ARCHITECTURES=90 >"$OUT/cmake.log" 2>&1 || tail -20 "$OUT/cmake.log"
fi
# Of the samples ONLY names, those CMake made targets of (a sample whose dependency is missing, e.g.
# FreeImage, is left out there: said here, not an error that stops the others' build).
targets=${ONLY:-}
: >"$OUT/build.log"
if [[ -n $targets ]]; then
	known=$(ninja -C build -t targets all 2>/dev/null | sed 's/:.*//')
	targets=
	for s in $ONLY; do
		if grep -qx "$s" <<<"$known"; then targets+=" $s"; else echo "$s: not a target here (CMake left it out: see cmake.log)"; fi
	done
	[[ -n $targets ]] || targets=nothing-to-build
fi
# shellcheck disable=SC2086 # targets is a list of target names
[[ $targets == nothing-to-build ]] || ninja -C build -k 0 -j "${JOBS:-16}" $targets >"$OUT/build.log" 2>&1
echo "samples built in $(($(date +%s) - T0)) s; $(grep -c 'FAILED:' "$OUT/build.log") failed targets"

worker_libraries
GCLIB=$W/gpucloud-lib
rm -rf "$GCLIB"
guest_libdir "$ROOT" "$W" "$GCLIB"
AUDIT=$ROOT/gpuserverd/guest/loader/build/libgpucloud-audit.so
uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
token=$("$ROOT/bin/gputoken" -public-key-out "$W/key" -server gs-samples -gpus "$uuid" -tier shared \
	-quota $((70 << 30)) -session samples)
data=$(mktemp -d "$W/data.XXXX")
"$ROOT/bin/gpuserverd" --backend cuda --id gs-samples --listen 127.0.0.1:7270 --listen-unix "$W/gs.sock" \
	--admin 127.0.0.1:7271 --public-key "$(cat "$W/key")" --data-dir "$data" --max-sessions-per-instance 64 \
	>"$OUT/gpuserverd.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null' EXIT
sleep 2
remote="LD_AUDIT=$AUDIT GPUCLOUD_LIBDIR=$GCLIB GPUCLOUD_CONFIG=/nonexistent GPUCLOUD_TOKEN=$token"
pids=()
for m in $MODES; do
	case $m in
	native) a="native=" ;;
	shm) a="shm=$remote GPUCLOUD_ENDPOINT=unix:$W/gs.sock GPUCLOUD_SHM_MIB=1024" ;;
	tcp) a="tcp=$remote GPUCLOUD_ENDPOINT=127.0.0.1:7270" ;;
	*) echo "unknown mode $m" >&2 && continue ;;
	esac
	# Unless SEQ=1 the modes run at the same time: this records pass or fail, not time.
	mkdir -p "$OUT/logs"
	LOGDIR=$OUT/logs python3 "$ROOT/scripts/samples-runner.py" build src/test_args.json "$OUT/samples-$m.tsv" "$a" >"$OUT/samples-$m.log" 2>&1 &
	pids+=($!)
	[[ ${SEQ:-} == 1 ]] && wait $!
done
wait "${pids[@]}"
for m in $MODES; do
	echo "$m: $(grep -c $'\tPASS\t' "$OUT/samples-$m.tsv") pass of $(wc -l <"$OUT/samples-$m.tsv")"
done
# The samples that pass natively and fail in a remote mode, with their telling line.
awk -F'\t' 'FNR==NR { if ($3=="PASS") ok[$1]=1; next } ok[$1] && $3!="PASS" { print $2": "$1" "$3" "$5 }' \
	"$OUT/samples-native.tsv" "$OUT"/samples-{shm,tcp}.tsv 2>/dev/null
echo "total $(($(date +%s) - T0)) s"
