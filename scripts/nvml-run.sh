#!/usr/bin/env bash
# nvml-run.sh: NVIDIA's nvidia-smi on the GPU machine, natively and over gpucloud's
# libnvidia-ml.so.1 (and gpucloud-smi over it) (gpuserverd/guest/nvml) talking to a gpuserverd on the real GPU, on a
# dedicated and a shared-tier token, with a CUDA session of the instance holding memory through
# the guest libcuda. Bundle with scripts/nvml-prep.sh DEST (here, with Go); run there:
#   bash DEST/scripts/nvml-run.sh      (results in $OUT, default ./nvml-run-out)
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-$PWD/nvml-run-out}
LIB=$ROOT/gpuserverd/guest/build
ADDR=127.0.0.1:7170
ADMIN=127.0.0.1:7171
mkdir -p "$OUT"
QUERY=name,uuid,memory.total,memory.used,utilization.gpu
smi() { # smi LOG ARGS...: nvidia-smi with its exit status appended to the log
	local log=$1
	shift
	timeout 15 nvidia-smi "$@" >"$OUT/$log" 2>&1
	echo "exit=$?" >>"$OUT/$log"
}

echo "== native"
smi native.txt
smi native-q.txt -q
smi native-query.txt --query-gpu=$QUERY --format=csv
native_lib=$(ldconfig -p | awk '/libnvidia-ml.so.1 /{print $NF; exit}')
[[ -z $native_lib && -e /usr/local/nvidia/lib64/libnvidia-ml.so.1 ]] && native_lib=/usr/local/nvidia/lib64/libnvidia-ml.so.1
echo "NVIDIA's library: $native_lib" | tee "$OUT/exports.txt"
nm -D --defined-only "$native_lib" | awk '$3 ~ /^nvml/ {print $3}' | sort -u >"$OUT/nvidia-exports.txt"
nm -D --defined-only "$LIB/libnvidia-ml.so.1" | awk '$3 ~ /^nvml/ {print $3}' | sort -u >"$OUT/gpucloud-exports.txt"
{
	echo "NVIDIA exports $(wc -l <"$OUT/nvidia-exports.txt") nvml names, gpucloud $(wc -l <"$OUT/gpucloud-exports.txt")"
	echo "NVIDIA's names gpucloud lacks:"
	comm -23 "$OUT/nvidia-exports.txt" "$OUT/gpucloud-exports.txt"
} >>"$OUT/exports.txt"

uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
key=$OUT/key.pub
start_server() { # start_server NAME: gpuserverd on the cuda backend, trusting the key gputoken last wrote
	local log=$OUT/gpuserverd-$1.log # one log each: waiting on a shared one found the last server's line
	"$ROOT/bin/gpuserverd" --backend cuda --id gs-nvml --listen $ADDR --admin $ADMIN \
		--public-key "$(cat "$key")" --data-dir "$OUT/data" >"$log" 2>&1 &
	srv=$!
	for _ in $(seq 50); do grep -q "gpuserverd serving" "$log" 2>/dev/null && break; sleep 0.2; done
}

run_tier() { # run_tier NAME TOKEN
	local name=$1 token=$2
	echo "== gpucloud $name"
	export GPUCLOUD_ENDPOINT=$ADDR GPUCLOUD_TOKEN=$token GPUCLOUD_CONFIG=/nonexistent
	# A CUDA session of the instance, through the guest libcuda, holding 256 MiB.
	mkfifo "$OUT/hold-$name"
	LD_LIBRARY_PATH=$LIB "$LIB/nvml_sim_test" hold 256 <"$OUT/hold-$name" >"$OUT/hold-$name.log" 2>&1 &
	local holder=$!
	exec 9>"$OUT/hold-$name"
	sleep 3 # the server learns a session's memory once a second
	LD_DEBUG=libs LD_LIBRARY_PATH=$LIB:${LD_LIBRARY_PATH:-} timeout 15 nvidia-smi -L 2>&1 | grep -E "libnvidia-ml|GPU " >"$OUT/$name-loaded.txt"
	LD_LIBRARY_PATH=$LIB:${LD_LIBRARY_PATH:-} smi "$name.txt"
	LD_LIBRARY_PATH=$LIB:${LD_LIBRARY_PATH:-} smi "$name-q.txt" -q
	LD_LIBRARY_PATH=$LIB:${LD_LIBRARY_PATH:-} smi "$name-query.txt" --query-gpu=$QUERY --format=csv
	LD_LIBRARY_PATH=$LIB:${LD_LIBRARY_PATH:-} GPUCLOUD_TRACE=1 smi "$name-trace.txt" -q
	# gpucloud-smi, in nvidia-smi's place (NVIDIA's needs its driver's private NVML tables).
	{ LD_LIBRARY_PATH=$LIB "$LIB/gpucloud-smi"; LD_LIBRARY_PATH=$LIB "$LIB/gpucloud-smi" --query-gpu=$QUERY --format=csv; } \
		>"$OUT/$name-gpucloud-smi.txt" 2>&1
	exec 9>&-
	wait $holder
	unset GPUCLOUD_ENDPOINT GPUCLOUD_TOKEN
}
# gputoken writes a new key each time: one server per token.
ded=$("$ROOT/bin/gputoken" -public-key-out "$key" -server gs-nvml -gpus "$uuid" -instance inst-a -session ded-a)
start_server dedicated
run_tier dedicated "$ded"
kill $srv
wait $srv
shared=$("$ROOT/bin/gputoken" -public-key-out "$key" -server gs-nvml -gpus "$uuid" -tier shared -quota 8589934592 -instance inst-b -session shr-b)
start_server shared
run_tier shared "$shared"
curl -s "http://$ADMIN/metrics" >"$OUT/metrics.txt" || true
kill $srv
wait $srv
for f in "$OUT"/*.txt; do echo "---- $(basename "$f")"; head -c 6000 "$f"; echo; done
