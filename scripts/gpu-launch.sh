#!/usr/bin/env bash
# gpu-launch.sh: the launch path on a GPU, several builds of gpucloud side by side in one run.
# gpubench's launch rows (and pinned 64 MiB copies) natively and over shared memory through each
# build's gpuserverd (cuda backend) and guest libcuda.so.1, ROUNDS times, interleaved, so that
# machine noise hits every build alike; then the median of the rounds' medians per build.
#
# Usage, on the GPU machine:  BUNDLE=dir [ROUNDS=3] [OUT=dir] bash gpu-launch.sh NAME[,VAR=VALUE]...
# BUNDLE holds gputoken, gputests/ (gpubench.c, common.h, kernels.cu, Makefile) and per NAME a
# folder with gpuserverd and libcuda.so.1 (each optionally as NAME.tar.xz). Prepared here with
# scripts/gpu-launch-prep.sh (docs/benchmarks/gpu-remote-h100.md, "Launch path"). A VAR=VALUE
# after the name is set in that gpuserverd's environment (a worker's switch, e.g.
# new,GPUCLOUD_SHM_COPY=dtod): the same build measured several ways in one run. BACKEND=simulated (with
# stand-ins for nvidia-smi and nvcc) tries the script on a machine without a GPU. TRANSPORT=tcp
# measures the remote runs over TCP on loopback instead of shared memory.
set -uo pipefail
BUNDLE=${BUNDLE:?BUNDLE: the prepared folder}
BUNDLE=$(cd "$BUNDLE" && pwd)
ROUNDS=${ROUNDS:-3}
OUT=${OUT:-/tmp/gpu-launch}
B=$OUT/build
SOCK=/tmp/gpu-launch.sock
ADMIN=127.0.0.1:7171
TCP=127.0.0.1:7172
TRANSPORT=${TRANSPORT:-shm}
[[ $TRANSPORT == tcp ]] && ENDPOINT=$TCP || ENDPOINT=unix:$SOCK
mkdir -p "$OUT" "$B"
[[ $# -gt 0 ]] || { echo "usage: BUNDLE=dir bash gpu-launch.sh NAME..." >&2; exit 2; }
for arg in "$@"; do
	n=${arg%%,*}
	[[ -f $BUNDLE/$n.tar.xz && ! -d $BUNDLE/$n ]] && tar -xJf "$BUNDLE/$n.tar.xz" -C "$BUNDLE"
	[[ -x $BUNDLE/$n/gpuserverd && -e $BUNDLE/$n/libcuda.so.1 ]] || { echo "no build $n in $BUNDLE" >&2; exit 2; }
done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
make -s -C "$BUNDLE/gputests" BUILD="$B" "$B/gpubench" "$B/kernels.ptx" || { echo "build failed"; exit 1; }

uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
key=$(mktemp)
token=$("$BUNDLE/gputoken" -public-key-out "$key" -server gs-launch -gpus "$uuid") || exit 1

# file NAME[,VAR=VALUE...]: the name its outputs are kept under (letters, digits, _ . - only, so
# that the device tool brings them back).
file() { printf '%s' "$1" | tr -c 'A-Za-z0-9_.-' '_'; }

# serve NAME[,VAR=VALUE...]: that build's gpuserverd on SOCK until stop, with those variables set;
# waits for its Unix socket.
serve() {
	local data name=${1%%,*} vars=()
	[[ $1 == *,* ]] && IFS=, read -r -a vars <<<"${1#*,}"
	data=$(mktemp -d)
	rm -f "$SOCK"
	env "${vars[@]}" "$BUNDLE/$name/gpuserverd" --backend "${BACKEND:-cuda}" --id gs-launch --listen "$TCP" --listen-unix "$SOCK" \
		--admin "$ADMIN" --public-key "$(cat "$key")" --data-dir "$data" >"$OUT/server-$(file "$1").log" 2>&1 &
	server=$!
	for _ in $(seq 100); do [[ -S $SOCK ]] && return 0; sleep 0.05; done
	echo "gpuserverd of $1 did not start"; return 1
}
stop() { kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; }

status=0
for r in $(seq "$ROUNDS"); do
	(cd "$B" && ./gpubench kernels.ptx launch) >"$OUT/native-$r.txt" || { echo "native gpubench failed"; status=1; }
	for n in "$@"; do
		serve "$n" || { status=1; continue; }
		(cd "$B" && env LD_LIBRARY_PATH="$BUNDLE/${n%%,*}" GPUCLOUD_ENDPOINT="$ENDPOINT" GPUCLOUD_TOKEN="$token" \
			GPUCLOUD_CONFIG=/nonexistent GPUCLOUD_SHM_MIB=256 timeout 60 ./gpubench kernels.ptx launch) >"$OUT/$(file "$n")-$r.txt" ||
			{ echo "gpubench through $n failed (round $r)"; status=1; }
		stop
	done
done

# The median over rounds of each round's median, per row and build; ratio to native.
echo
printf '| row | native |'; for n in "$@"; do printf ' %s |' "$n"; done; echo
printf '| --- | ---: |'; for n in "$@"; do printf ' ---: |'; done; echo
for row in h2d_pinned_64MiB d2h_pinned_64MiB launch_async launch_sync; do
	med() { awk -v row="$row" '$1 == "BENCH" && $2 == row {print $4}' "$OUT"/"$(file "$1")"-*.txt | sort -g | awk '{v[NR] = $1} END {if (NR) print v[int((NR + 1) / 2)]}'; }
	nat=$(med native)
	printf '| %s | %s |' "$row" "$nat"
	for n in "$@"; do
		v=$(med "$n")
		if [[ -n $v && -n $nat ]]; then printf ' %s (%s) |' "$v" "$(awk -v a="$v" -v b="$nat" 'BEGIN {printf "%.2f", a / b}')"; else printf ' - |'; fi
	done
	echo
done
echo
# at NAME ROUND ROW: that run's median of ROW; runs NAME ROUND ROW: its pinned buffer's physically
# contiguous runs (gpubench's "# ROW: ..." line).
at() { awk -v row="$3" '$1 == "BENCH" && $2 == row {print $4}' "$OUT/$(file "$1")-$2.txt" 2>/dev/null; }
runs() { awk -v row="$3:" '$1 == "#" && $2 == row {print $6}' "$OUT/$(file "$1")-$2.txt" 2>/dev/null; }
echo "per round (launch_async / launch_sync µs):"
for r in $(seq "$ROUNDS"); do
	printf 'round %s: native %s / %s' "$r" "$(at native "$r" launch_async)" "$(at native "$r" launch_sync)"
	for n in "$@"; do printf ', %s %s / %s' "$n" "$(at "$n" "$r" launch_async)" "$(at "$n" "$r" launch_sync)"; done
	echo
done
echo "per round, pinned 64 MiB (h2d / d2h GB/s, [physically contiguous runs of the host pages]):"
for r in $(seq "$ROUNDS"); do
	printf 'round %s:' "$r"
	for n in native "$@"; do
		printf ' %s %s [%s] / %s [%s];' "$n" "$(at "$n" "$r" h2d_pinned_64MiB)" "$(runs "$n" "$r" h2d_pinned_64MiB)" \
			"$(at "$n" "$r" d2h_pinned_64MiB)" "$(runs "$n" "$r" d2h_pinned_64MiB)"
	done
	echo
done
exit $status
