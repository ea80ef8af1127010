#!/usr/bin/env bash
# gpu-torch.sh: the stock PyTorch of the GPU machine (python3; no rebuilt wheel), natively and
# through gpucloud over shared memory and over TCP, case by case (gpuserverd/guest/gputests/torch).
# Run from a bundle made by scripts/torch-prep.sh DEST (Go is not installed on the GPU machine):
#
#   bash DEST/scripts/gpu-torch.sh            results in $OUT (default ./torch-out)
#
# Through gpucloud, the process loads gpucloud's libraries whatever torch's DT_RPATH says, by the
# guest image's mechanism: LD_AUDIT=libgpucloud-audit.so with GPUCLOUD_LIBDIR naming a folder
# holding what /usr/lib/gpucloud holds in a VM: gpucloud's libcuda.so.1 (the guest library),
# libcudart.so.13, libcublas.so.13 (every cuBLAS name), libcublasLt.so.13, libcudnn.so.9 and
# libnvidia-ml.so.1, libcusolver.so.12, libcusparse.so.12, libcufft.so.12 and libcurand.so.10
# (those five prebuilt in the bundle). libcudart, libcublas and libcublasLt are built here against
# the toolkit's headers. NCCL loads gpucloud's libnccl.so.2 where the case asks for it. The workers
# run NVIDIA's cuBLAS, cuBLASLt, cuDNN, cuSOLVER, cuSPARSE, cuFFT and cuRAND from torch's wheel (the
# same builds the native run uses, so the same kernels), unless GPUSERVERD_CUBLAS,
# GPUSERVERD_CUBLASLT, GPUSERVERD_CUDNN, GPUSERVERD_CUSOLVER, GPUSERVERD_CUSPARSE, GPUSERVERD_CUFFT
# or GPUSERVERD_CURAND name others.
#
# Modes: native; shm (unix socket + shared arena), ivshmem (a VM's channel, here a file in
# /dev/shm mapped by the process itself, as the guest maps the device's BAR 2: the same rings and
# arena, with the polling doorbell a VM has), tcp (loopback); oom (two shared-tier sessions).
# Environment: OUT, MODES ("native shm oom tcp"; shm-nolt and tcp-nolt are a switch for trying
# the rest when cuBLASLt or cuDNN fail: they run with torch's own switches away from them,
# DISABLE_ADDMM_CUDA_LT=1 (cuBLASLt for addmm) and SDPA_NO_CUDNN=1 (cuDNN attention), and then the
# oom phase's neighbour too), REMOTE_EXTRA (NAME=value words for every remote process), CASES,
# CASE_TIMEOUT (s, default 60), OOM_QUOTA (bytes, default 4 GiB), OUT_TAR (an archive of $OUT),
# CASES_<mode> (that mode's cases instead of CASES), NCCL_MODES (modes that also run the nccl case,
# in a process whose gpucloud folder holds gpucloud's libnccl.so.2 too; default "native shm"),
# PREBUILT=1 (take libcudart, libcublas, libcublasLt from the bundle's prebuilt/, which
# torch-prep.sh fills when given CUDA_HEADERS), ROUNDTRIP_MODES (modes whose frames per benchmark step are counted from a GPUCLOUD_TRACE=1 run:
# roundtrips-MODE.md; default "shm"), IVSHMEM_MIB (the channel's size, default 1024).
set -uo pipefail
export PATH=$PATH:/usr/local/cuda/bin
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-$PWD/torch-out}
W=$(mktemp -d /tmp/gpu-torch.XXXXXX)
TORCHDIR=$ROOT/gpuserverd/guest/gputests/torch
ADDR=127.0.0.1:7170 ADMIN=127.0.0.1:7171 SOCK=$W/gpuserverd.sock SERVER_ID=gs-torch
MODES=${MODES:-native shm oom tcp}
# graphs last: a capture that fails part-way leaves torch's RNG believing a capture is under way,
# and every later case of the same process that draws random numbers on the GPU fails with
# "Offset increment outside graph capture" (as the second H100 run showed).
CASES=${CASES:-mlp cnn cnn_nocudnn transformer linalg fft sparse profiler nvrtc compile bench_latency bench_resnet50 bench_gpt2 graphs}
export CASE_TIMEOUT=${CASE_TIMEOUT:-60}
OOM_QUOTA=${OOM_QUOTA:-4294967296}
NCCL_MODES=${NCCL_MODES:-native shm}
ROUNDTRIP_MODES=${ROUNDTRIP_MODES:-shm}
IVDIR=$(mktemp -d /dev/shm/gpu-torch.XXXXXX) # a VM's channel file lives in tmpfs, as libvirt's
mkdir -p "$OUT"
server=""
trap '[[ -n $server ]] && kill $server 2>/dev/null; rm -rf "$W" "$IVDIR"' EXIT
step() { printf '\n== %s (%s)\n' "$*" "$(date -u +%T)"; }

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())' 2>&1 | tee "$OUT/versions.txt"

step "build gpucloud's libcudart, libcublas and libcublasLt against the toolkit"
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}
. "$ROOT/scripts/lib/gclib.sh"
worker_libraries
GCLIB=$W/gpucloud-lib # what /usr/lib/gpucloud holds in a VM
guest_libdir "$ROOT" "$W" "$GCLIB"
# NCCL's folder: the same, with gpucloud's libnccl.so.2 (only the nccl case's process loads it).
GCLIB_NCCL=$W/gpucloud-lib-nccl
mkdir -p "$GCLIB_NCCL" && cp "$GCLIB"/* "$GCLIB_NCCL/" && cp "$ROOT/gpuserverd/guest/nccl/build/libnccl.so.2" "$GCLIB_NCCL/"
AUDIT=$ROOT/gpuserverd/guest/loader/build/libgpucloud-audit.so
[[ -f $AUDIT ]] || make -s -C "$ROOT/gpuserverd/guest/loader" BUILD="$(dirname "$AUDIT")"
ls -l "$GCLIB"

# Same for every mode: deterministic cuBLAS, one compile cache (the remote runs reuse native's
# compiled Triton kernels: what they exercise is loading and launching them through gpucloud).
export CUBLAS_WORKSPACE_CONFIG=:4096:8 TORCHINDUCTOR_CACHE_DIR=$W/inductor TRITON_CACHE_DIR=$W/triton

# run_cases MODE CASE...: runs the cases in as few processes as a crash allows, appending results
# to $OUT/MODE.jsonl; a case that ended its process is recorded as failed and the rest go on.
run_cases() {
	local mode=$1 rc todo
	shift
	todo="$*"
	[[ -z ${APPEND:-} ]] && rm -f "$OUT/$mode.jsonl"
	while [[ -n $todo ]]; do
		# shellcheck disable=SC2086 # case names are words
		timeout $((CASE_TIMEOUT * 3 + 60)) env "${MODE_ENV[@]}" python3 "$TORCHDIR/torch_cases.py" --out "$OUT/$mode.jsonl" $todo >>"$OUT/$mode.log" 2>&1
		rc=$?
		todo=$(python3 - "$OUT/$mode.jsonl" "$rc" "$OUT/$mode.log" $todo <<'PY'
import json, os, sys
path, rc, log, cases = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
tail = [l.strip() for l in open(log, errors="replace")][-1:] if os.path.exists(log) else []
done, started = set(), None
for line in open(path) if os.path.exists(path) else []:
    r = json.loads(line)
    if "start" in r: started = r["start"]
    if "case" in r: done.add(r["case"]); started = None if started == r["case"] else started
with open(path, "a") as f:
    if started and started not in done:
        f.write(json.dumps({"case": started, "status": "FAIL", "reason": f"the process ended during this case (exit {rc}): {tail[0][:200] if tail else ''}"}) + "\n")
        done.add(started)
    left = [c for c in cases if c not in done]
    if left == cases:  # not one case began: the process cannot start them; say so for each
        for c in left:
            f.write(json.dumps({"case": c, "status": "FAIL", "reason": f"python3 ended before any case (exit {rc}): {tail[0][:200] if tail else ''}"}) + "\n")
        left = []
print(" ".join(left))
PY
)
	done
	grep -E '^(PASS|FAIL|SKIP) ' "$OUT/$mode.log" | sed "s/^/$mode: /"
}

sessions_active() {
	local reply auth=""
	[[ -f ${SERVER_DATA:-}/admin-token ]] && auth="Authorization: Bearer $(cat "$SERVER_DATA/admin-token")"
	reply=$( { exec 3<>"/dev/tcp/${ADMIN%:*}/${ADMIN##*:}" && printf 'GET /metrics HTTP/1.0\r\n%s\r\n\r\n' "$auth" >&3 && cat <&3; } 2>/dev/null) || return 1
	sed -n 's/^gpuserverd_sessions_active \([0-9]*\).*/\1/p' <<<"$reply"
}
start_server() { # KEYFILE LOG
	SERVER_DATA=$(mktemp -d "$W/data.XXXX") # gpuserverd writes its admin token there
	"$ROOT/bin/gpuserverd" --backend cuda --id "$SERVER_ID" --listen "$ADDR" --listen-unix "$SOCK" --admin "$ADMIN" \
		--ivshmem-dir "$IVDIR" --ivshmem-slots 1 --public-key "$(cat "$1")" --data-dir "$SERVER_DATA" >"$OUT/$2.log" 2>&1 &
	server=$!
	for _ in $(seq 50); do [[ -n $(sessions_active) ]] && break; sleep 0.2; done
}
stop_server() { kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; server=""; }
wait_idle() { for _ in $(seq 50); do [[ $(sessions_active) == 0 ]] && return; sleep 0.1; done; }

uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
REMOTE_ENV=(LD_AUDIT="$AUDIT" GPUCLOUD_LIBDIR="$GCLIB" GPUCLOUD_CONFIG=/nonexistent)
# shellcheck disable=SC2206 # words on purpose
REMOTE_ENV+=(${REMOTE_EXTRA:-})
# extras MODE: the nccl case (with gpucloud's libnccl.so.2 where remote) and the round-trip count.
extras() {
	local mode=$1 saved=("${MODE_ENV[@]}")
	if [[ " $NCCL_MODES " == *" $mode "* ]]; then
		[[ $mode != native ]] && MODE_ENV+=(GPUCLOUD_LIBDIR="$GCLIB_NCCL")
		APPEND=1 run_cases "$mode" nccl
		MODE_ENV=("${saved[@]}")
	fi
	if [[ " $ROUNDTRIP_MODES " == *" $mode "* ]]; then
		env "${MODE_ENV[@]}" GPUCLOUD_TRACE=1 python3 "$TORCHDIR/torch_cases.py" --out "$OUT/roundtrips-$mode.jsonl" roundtrips \
			>"$W/roundtrips.out" 2>"$W/roundtrips.trace"
		python3 "$TORCHDIR/roundtrips.py" "$W/roundtrips.trace" | tee "$OUT/roundtrips-$mode.md"
		grep -v 'gpucloud-trace: send ' "$W/roundtrips.trace" | tail -40 >"$OUT/roundtrips-$mode.log"
	fi
}
cases_of() { local v="CASES_${1//-/_}"; echo "${!v:-$CASES}"; }

for mode in $MODES; do
	case $mode in
	native)
		step "native"
		MODE_ENV=()
		run_cases native $(cases_of native)
		extras native
		;;
	shm | tcp | ivshmem | shm-nolt | tcp-nolt)
		step "through gpucloud: $mode"
		if [[ -z $server ]]; then
			# the channel gpuserverd serves: hostd makes it for a VM (0600; one slot of the whole size)
			truncate -s "${IVSHMEM_MIB:-1024}M" "$IVDIR/gpucloud-instance-gputest" && chmod 600 "$IVDIR/gpucloud-instance-gputest"
			key=$W/key
			token=$("$ROOT/bin/gputoken" -public-key-out "$key" -server "$SERVER_ID" -gpus "$uuid" -session torch)
			start_server "$key" gpuserverd
		fi
		wait_idle
		ep=unix:$SOCK
		[[ $mode == tcp* ]] && ep=$ADDR
		[[ $mode == ivshmem ]] && ep=ivshmem:$IVDIR/gpucloud-instance-gputest
		MODE_ENV=("${REMOTE_ENV[@]}" GPUCLOUD_ENDPOINT="$ep" GPUCLOUD_TOKEN="$token" GPUCLOUD_SHM_MIB=1024)
		[[ $mode == *-nolt ]] && MODE_ENV+=(DISABLE_ADDMM_CUDA_LT=1 SDPA_NO_CUDNN=1)
		# What the process loaded, and whether it is gpucloud's (the first case's process).
		env "${MODE_ENV[@]}" GPUCLOUD_AUDIT="$AUDIT" "$ROOT/gpuserverd/guest/loader/gpucloud-info" -- python3 -c \
			'import torch; torch.cuda.is_available() and torch.ones(1, device="cuda").sum().item()' >"$OUT/gpucloud-info-$mode.txt" 2>&1
		run_cases "$mode" $(cases_of "$mode")
		extras "$mode"
		;;
	oom)
		step "shared tier: a session over its quota next to a neighbour training (shm)"
		[[ -n $server ]] && stop_server
		okey=$W/okey
		mapfile -t ot < <("$ROOT/bin/gputoken" -public-key-out "$okey" -server "$SERVER_ID" -gpus "$uuid" -tier shared -quota "$OOM_QUOTA" -session torchoom -count 2)
		start_server "$okey" gpuserverd-oom
		MODE_ENV=("${REMOTE_ENV[@]}" GPUCLOUD_ENDPOINT="unix:$SOCK" GPUCLOUD_TOKEN="${ot[0]}" GPUCLOUD_SHM_MIB=256)
		[[ " $MODES " == *-nolt* ]] && MODE_ENV+=(DISABLE_ADDMM_CUDA_LT=1) # the neighbour must train
		run_cases neighbour neighbour &
		nb=$!
		sleep 8 # the neighbour is importing torch and starting to train
		MODE_ENV=("${REMOTE_ENV[@]}" GPUCLOUD_ENDPOINT="unix:$SOCK" GPUCLOUD_TOKEN="${ot[1]}" GPUCLOUD_SHM_MIB=256 TORCH_QUOTA="$OOM_QUOTA")
		run_cases oom oom
		wait $nb
		stop_server
		;;
	esac
done
[[ -n $server ]] && stop_server

step "notices (calls gpucloud refused or could not answer), by count"
cat "$OUT"/*.log 2>/dev/null | grep -oE 'gpucloud( lib[a-zA-Z]+)?: [A-Za-z0-9_]+ (is )?not [a-z ]*|gpucloud( lib[a-zA-Z]+)?: [A-Za-z0-9_]+ failed \([^)]*\)' | sort | uniq -c | sort -rn | tee "$OUT/notices.txt"
step "results"
args=()
for m in native shm ivshmem tcp shm-nolt tcp-nolt neighbour oom; do [[ -f $OUT/$m.jsonl ]] && args+=("$m=$OUT/$m.jsonl"); done
python3 "$TORCHDIR/compare.py" "${args[@]}" | tee "$OUT/tables.md"
for f in "$OUT"/gpucloud-info-*.txt; do [[ -f $f ]] && { echo "-- $f"; grep -vE '^(loaded|  redirect)' "$f" | tail -15; }; done
# OUT_TAR=FILE: everything in $OUT as one archive (the device tool brings back only so many files).
[[ -n ${OUT_TAR:-} ]] && tar -C "$OUT" -czf "$OUT_TAR" .
exit 0
