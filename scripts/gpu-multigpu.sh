#!/usr/bin/env bash
# gpu-multigpu.sh: issue 19 on a machine with several GPUs, natively and through gpucloud over
# shared memory (Unix socket + arena), one process per rank as torchrun runs them:
#   1. all-reduce bus bandwidth, nccl-tests style (bin/allreduce_perf), 8 B to MAXBYTES (1 GiB);
#   2. PyTorch DDP of a small MLP (ddp_check.py), per-step losses, and torch.distributed
#      all-reduce bandwidth at 1 GiB.
# Run from a bundle made by scripts/multigpu-prep.sh DEST (Go is not installed on the GPU machine):
#   bash DEST/scripts/gpu-multigpu.sh          results in $OUT (default ./multigpu-out)
# Environment: OUT, NRANKS (2), MAXBYTES (1 GiB), STEPS ("bw-native bw-gpucloud ddp-native
# ddp-gpucloud"), STEP_TIMEOUT (s, 75). BACKEND=simulated (with STEPS=bw-gpucloud) is a dry run of
# the gpucloud side on the simulated backend, for machines without GPUs.
BACKEND=${BACKEND:-cuda}
set -uo pipefail
B=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-$PWD/multigpu-out}
N=${NRANKS:-2}
MAXBYTES=${MAXBYTES:-1073741824}
STEPS=${STEPS:-bw-native bw-gpucloud ddp-native ddp-gpucloud}
T=${STEP_TIMEOUT:-75}
W=$(mktemp -d /tmp/gpu-multigpu.XXXXXX)
mkdir -p "$OUT"
server=""
trap '[[ -n $server ]] && kill $server 2>/dev/null; rm -rf "$W"' EXIT
step() { printf '\n== %s (%s)\n' "$*" "$(date -u +%T)"; }

step "machine"
[[ $BACKEND == simulated ]] || nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
[[ $BACKEND == simulated ]] || nvidia-smi topo -m 2>&1 | head -8
site=$(python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
NCCLLIB=$site/nvidia/nccl/lib
ls -l "$NCCLLIB"
# Which NCCL names PyTorch imports (what gpucloud's libnccl must answer).
nm -D --undefined-only "$site/torch/lib/libtorch_cuda.so" 2>/dev/null | grep -o 'nccl[A-Za-z]*' | sort -u | tr '\n' ' ' | tee "$OUT/torch-nccl-imports.txt"
echo
NATIVE_LD=$NCCLLIB:/usr/local/nvidia/lib64
export NCCL_DEBUG=INFO NCCL_DEBUG_FILE=$W/nccl.%h.%p.log CUBLAS_WORKSPACE_CONFIG=:4096:8

# ranks NAME CMD...: runs CMD once per rank (RANK set), rank i's extra environment in RANK_ENV_i;
# rank 0's stdout to $OUT/NAME.txt, every rank's stderr to $OUT/NAME.rankI.log.
ranks() {
	local name=$1 pids=() rc=0
	shift
	rm -f "$W/id"
	for ((r = 0; r < N; r++)); do
		local ev="RANK_ENV_$r" out=/dev/null
		((r == 0)) && out=$OUT/$name.txt
		# shellcheck disable=SC2086 # the rank's NAME=value words
		timeout "$T" env RANK=$r WORLD_SIZE=$N LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=29517 ${!ev:-} "$@" \
			>"$out" 2>"$OUT/$name.rank$r.log" &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p" || rc=$?; done
	cat "$OUT/$name.txt"
	if [[ $rc != 0 ]]; then
		echo "FAILED: $name (exit $rc)"
		for f in "$OUT/$name".rank*.log; do echo "-- $f"; grep -v '^$' "$f" | tail -12; done
		[[ -f $OUT/gpuserverd.log ]] && { echo "-- gpuserverd.log"; tail -12 "$OUT/gpuserverd.log"; }
	fi
	# NCCL's transports as its INFO lines name them (P2P/CUMEM, NVLS, SHM...).
	cat "$W"/nccl.*.log 2>/dev/null | grep -E 'via |NVLS|Connected all' | sed 's/^[^ ]* //' | sort | uniq -c | sort -rn | head -6 >"$OUT/$name.transports.txt"
	rm -f "$W"/nccl.*.log
	head -6 "$OUT/$name.transports.txt"
	return 0
}

GCLIB=$B/lib
SOCK=$W/gpuserverd.sock
start_server() {
	local uuids
	if [[ $BACKEND == simulated ]]; then
		export GPUSERVERD_SIM_DEVICES=$N
		uuids=$(for ((r = 0; r < N; r++)); do printf 'GPU-51a10000-0000-4000-8000-%012d\n' $r; done | paste -sd,)
	else
		uuids=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -"$N" | paste -sd,)
	fi
	mapfile -t tok < <("$B/bin/gputoken" -public-key-out "$W/key" -server gs-mgpu -gpus "$uuids" -instance inst-ddp -session mg -count $((2 * N)))
	mkdir -p "$W/data"
	GPUSERVERD_NCCL=$NCCLLIB/libnccl.so.2 GPUSERVERD_CUBLAS=$site/nvidia/cu13/lib/libcublas.so.13 \
		GPUSERVERD_CUBLASLT=$site/nvidia/cu13/lib/libcublasLt.so.13 GPUSERVERD_CUDNN=$site/nvidia/cudnn/lib/libcudnn.so.9 \
		"$B/bin/gpuserverd" --backend "$BACKEND" --id gs-mgpu --listen 127.0.0.1:7270 --listen-unix "$SOCK" --admin 127.0.0.1:7271 \
		--public-key "$(cat "$W/key")" --data-dir "$W/data" >"$OUT/gpuserverd.log" 2>&1 &
	server=$!
	for _ in $(seq 50); do [[ -S $SOCK ]] && break; sleep 0.2; done
}
gc_env() { # gc_env FIRST_TOKEN: RANK_ENV_i for the gpucloud ranks, token FIRST+i each
	for ((r = 0; r < N; r++)); do
		printf -v "RANK_ENV_$r" '%s' "GPUCLOUD_ENDPOINT=unix:$SOCK GPUCLOUD_TOKEN=${tok[$1 + r]} GPUCLOUD_CONFIG=/nonexistent GPUCLOUD_SHM_MIB=256 $2"
	done
}
no_env() { for ((r = 0; r < N; r++)); do unset "RANK_ENV_$r"; done; }

for s in $STEPS; do
	case $s in
	bw-native)
		step "all-reduce bandwidth, native ($N processes)"
		no_env
		ranks bw-native env LD_LIBRARY_PATH=$NATIVE_LD "$B/bin/allreduce_perf" "$W/id" "$MAXBYTES"
		;;
	bw-gpucloud)
		step "all-reduce bandwidth, through gpucloud over shared memory ($N processes, one session each)"
		[[ -z $server ]] && start_server
		gc_env 0 "LD_LIBRARY_PATH=$GCLIB"
		ranks bw-gpucloud "$B/bin/allreduce_perf" "$W/id" "$MAXBYTES"
		;;
	ddp-native)
		step "PyTorch DDP, native"
		no_env
		ranks ddp-native python3 "$B/scripts/ddp_check.py"
		;;
	ddp-gpucloud)
		step "PyTorch DDP, through gpucloud over shared memory"
		[[ -z $server ]] && start_server
		gc_env "$N" "LD_AUDIT=$B/libgpucloud-audit.so GPUCLOUD_LIBDIR=$GCLIB"
		ranks ddp-gpucloud python3 "$B/scripts/ddp_check.py"
		;;
	esac
done
[[ -n $server ]] && { kill "$server"; wait "$server" 2>/dev/null; server=""; }
grep -iE 'nccl|error|warn' "$OUT/gpuserverd.log" | grep -v ' INFO ' | head -20

step "summary"
python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
def bw(name):
    rows = {}
    p = os.path.join(out, name + ".txt")
    for line in open(p) if os.path.exists(p) else []:
        f = line.split()
        if len(f) == 5 and not line.startswith("#"):
            rows[int(f[0])] = (float(f[1]), float(f[3]), f[4] == "1")
    return rows
n, g = bw("bw-native"), bw("bw-gpucloud")
print("| bytes | native time (us) | native busbw (GB/s) | gpucloud time (us) | gpucloud busbw (GB/s) | gpucloud/native | right |")
print("|---:|---:|---:|---:|---:|---:|:---:|")
for b in sorted(set(n) | set(g)):
    a, c = n.get(b), g.get(b)
    ratio = f"{c[1] / a[1]:.3f}" if a and c and a[1] else "-"
    print(f"| {b} | {a[0] if a else '-'} | {a[1] if a else '-'} | {c[0] if c else '-'} | {c[1] if c else '-'} | {ratio} | {'yes' if (not a or a[2]) and (not c or c[2]) else 'NO'} |")
def ddp(name):
    p = os.path.join(out, name + ".txt")
    for line in open(p) if os.path.exists(p) else []:
        if line.startswith("{"):
            return json.loads(line)
dn, dg = ddp("ddp-native"), ddp("ddp-gpucloud")
for k, d in (("native", dn), ("gpucloud", dg)):
    if d:
        print(f"DDP {k}: world {d['world']}, losses {d['losses'][0]:.6f} .. {d['losses'][-1]:.6f}, weights sum {d['weights_sum']!r}, "
              f"ranks agree {d['ranks_agree']}, train {d['train_seconds']} s, torch all-reduce 1 GiB {d['torch_allreduce_1GiB_us']} us, "
              f"busbw {d['torch_busbw_GBps']} GB/s")
if dn and dg:
    diff = max(abs(a - b) for a, b in zip(dn["losses"], dg["losses"]))
    print(f"DDP losses: {len(dn['losses'])} steps, equal step by step: {dn['losses'] == dg['losses']}, max |diff| {diff:.3g}; "
          f"weights equal: {dn['weights_sum'] == dg['weights_sum']}")
PY
exit 0
