#!/usr/bin/env bash
# gpu-migration.sh: sessions that outlive their server (issue 18) on one GPU, from a bundle made by
# scripts/torch-prep.sh DEST (Go is not installed on the GPU machine):
#
#   bash DEST/scripts/gpu-migration.sh        results in $OUT (default ./migration-out)
#
# Two gpuserverd processes on the one GPU stand for two servers (A and B). A driver-API program
# (gpuserverd/guest/gputests/migrate.c, built here with nvcc and cc) holding 1 to 32 GiB of device
# memory checks every step's results against its own model while its session is moved A -> B
# through A's admin API; then the same program is checkpointed (stopped), restored, and lives
# through a SIGKILL and restart of gpuserverd. Each run's step count is replayed natively and the
# checksums compared. A PyTorch training loop is moved mid-run too, and its
# losses compared with a native run's. First the cuda backend's GPU tests (bin/cuda.test, built
# by torch-prep.sh) run, checkpoint and restore among them. Prints a markdown table
# ($OUT/migration.md), a row as each case ends. Environment: OUT, PLAN (the cases in order; default
# "mig:1 mig:8 mig:32 migs:1 migs:8 cp:1 restart torch": mig:G moves a G GiB session (B on the
# same GPU takes its memory over: handed over, not copied), migs:G moves one copying its memory
# through the connection as between two hosts (copy=stream: pre-copied while the program runs,
# the rest in the pause), cp:G checkpoints and restores one, restart kills and restarts
# gpuserverd, torch moves a training loop, glob moves and globcp checkpoints and restores a
# program whose kernel keeps its state in globals the driver places: globals.c, whose fat binary's
# __device__ and __constant__ variables must come back with their contents, not their initial
# values), CASE_S (the longest a case's program may run, s; default 120), CUDA_TEST_S (how long
# the backend's GPU tests may run; default 120; 0 runs only the one reading nvcc's images).
set -uo pipefail
export PATH=$PATH:/usr/local/cuda/bin
# Allocations through the virtual memory API, so that sessions can move (backend/cuda/sessionmem.go).
export GPUSERVERD_MOVABLE_MEMORY=1
# Memory handed over between the two workers on the one GPU (worker.HandoverEnv; on by default,
# named here so a run says what it measured).
export GPUSERVERD_HANDOVER=1
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-$PWD/migration-out}
PLAN=${PLAN:-mig:1 mig:8 mig:32 migs:1 migs:8 cp:1 restart torch}
CASE_S=${CASE_S:-120}
CUDA_TEST_S=${CUDA_TEST_S:-120}
W=$(mktemp -d /tmp/gpu-migration.XXXXXX)
T=$ROOT/gpuserverd/guest/gputests
A_ADDR=127.0.0.1:7270 A_ADMIN=127.0.0.1:7271 B_ADDR=127.0.0.1:7280 B_ADMIN=127.0.0.1:7281
# Each case's output goes to $L, archived into $OUT/logs.tgz at the end (or when stopped): the GPU
# machine's tool returns only a few files.
L=$W/logs
mkdir -p "$OUT" "$L"
declare -A PID DATA
trap 'for p in "${PID[@]}"; do kill "$p" 2>/dev/null; done; tar -C "$W" -czf "$OUT/logs.tgz" logs; rm -rf "$W"' EXIT
trap 'exit 124' TERM
step() { printf '\n== %s (%s)\n' "$*" "$(date -u +%T)"; }
row() { echo "$*" | tee -a "$OUT/migration.md"; }

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/machine.txt"
free -g | head -2

step "build the test program"
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}
nvcc -ptx -arch=compute_90 -o "$W/migkernels.ptx" "$T/migkernels.cu" || exit 1
cc -O2 -Wall -I"$CUDA_HOME/include" -o "$W/migrate" "$T/migrate.c" -L"$CUDA_HOME/lib64/stubs" -lcuda || exit 1
# The globals program's module: a fat binary (sm_90 SASS and compute_90 PTX), whose globals only
# the driver places.
nvcc -fatbin -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 \
	-o "$W/globalkernels.fatbin" "$T/globalkernels.cu" || exit 1
cc -O2 -Wall -I"$CUDA_HOME/include" -o "$W/globals" "$T/globals.c" -L"$CUDA_HOME/lib64/stubs" -lcuda || exit 1
# The program and module prog and finish run (the globals cases switch them).
PROG_BIN=$W/migrate PROG_MOD=$W/migkernels.ptx

step "the cuda backend's GPU tests (VMM allocations, checkpoint and restore)"
# and the names of the globals module images hold, read from what nvcc made of globalkernels.cu
mkdir -p "$W/images"
nvcc -cubin -arch=sm_90 -o "$W/images/globalkernels.cubin" "$T/globalkernels.cu"
nvcc -ptx -arch=compute_90 -o "$W/images/globalkernels.ptx" "$T/globalkernels.cu"
nvcc -fatbin -Xfatbin=-compress-all -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 \
	-o "$W/images/globalkernels-compressed.fatbin" "$T/globalkernels.cu"
cp "$W/globalkernels.fatbin" "$W/images/"
mkdir -p "$OUT/images" && cp "$W"/images/* "$OUT/images/"
tests='TestGPU|TestModuleGlobalNamesOfNvccImagesInDir'
((CUDA_TEST_S > 0)) || tests=TestModuleGlobalNamesOfNvccImagesInDir
(cd "$W" && GPUCLOUD_NVCC_IMAGES=$W/images timeout "$((CUDA_TEST_S > 0 ? CUDA_TEST_S : 30))" "$ROOT/bin/cuda.test" -test.run "$tests" -test.v 2>&1) |
	grep -E '^(=== RUN|--- |PASS|FAIL|ok|\s+\S+_test.go)' | tee "$OUT/cuda-test.txt"

. "$ROOT/scripts/lib/gclib.sh"
worker_libraries >/dev/null 2>&1 || true
uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
mapfile -t TA < <("$ROOT/bin/gputoken" -public-key-out "$W/keyA" -server gs-a -gpus "$uuid" -session mig -count 16)
mapfile -t TB < <("$ROOT/bin/gputoken" -public-key-out "$W/keyB" -server gs-b -gpus "$uuid" -session mig -count 16)

start() { # NAME ADDR ADMIN [DATA]
	DATA[$1]=${4:-$(mktemp -d "$W/data-$1.XXXX")}
	"$ROOT/bin/gpuserverd" --backend cuda --id "gs-$1" --listen "$2" --admin "$3" --public-key "$(cat "$W/key${1^^}")" \
		--data-dir "${DATA[$1]}" >>"$L/gpuserverd-$1.log" 2>&1 &
	PID[$1]=$!
	for _ in $(seq 100); do
		python3 -c "import urllib.request,sys; urllib.request.urlopen('http://$3/healthz', timeout=1)" 2>/dev/null && return
		sleep 0.1
	done
	echo "gpuserverd $1 did not come up"
}
admin() { # SERVER ADMINADDR METHOD PATH [JSON]
	python3 - "${DATA[$1]}" "$2" "$3" "$4" "${5:-}" <<'PY'
import sys, urllib.request, urllib.error
data, addr, method, path, body = sys.argv[1:6]
tok = open(data + "/admin-token").read().strip()
req = urllib.request.Request(f"http://{addr}{path}", data=body.encode() if body else None, method=method,
                             headers={"Authorization": "Bearer " + tok, "Content-Type": "application/json"})
try:
    with urllib.request.urlopen(req, timeout=150) as r:
        print(r.read().decode().strip())
except urllib.error.HTTPError as e:
    print(e.read().decode().strip())
PY
}
field() { python3 -c "import json,sys; d=json.loads(sys.argv[1]); [d:=d.get(k, {}) for k in sys.argv[2].split('.')]; print(d if d != {} else '-')" "$1" "$2" 2>/dev/null || echo -; }
prog() { # N(token index) GIB NAME: the program on A, in the background
	# a resume window long enough for an 8 GiB checkpoint and restore (the default is 30 s)
	env LD_LIBRARY_PATH="$ROOT/gpuserverd/guest/build" GPUCLOUD_CONFIG=/nonexistent GPUCLOUD_ENDPOINT=$A_ADDR GPUCLOUD_RESUME_S=120 \
		GPUCLOUD_TOKEN="${TA[$1]}" timeout "$CASE_S" "$PROG_BIN" "$PROG_MOD" "$2" 50 "$W/stop-$3" \
		>"$L/$3.out" 2>"$L/$3.err" &
	PROG=$!
	for _ in $(seq 600); do grep -q READY "$L/$3.out" && return 0; kill -0 $PROG 2>/dev/null || break; sleep 0.1; done
	echo "$3: the program never got ready"; cat "$L/$3.err"; return 1
}
finish() { # NAME: stops the program, checks it and replays its steps natively
	sleep 1
	touch "$W/stop-$1"
	wait $PROG # the program's own timeout (CASE_S) bounds it
	local ok steps sum native
	ok=$(grep -o 'MIGRATE OK.*' "$L/$1.out")
	steps=$(sed -n 's/.*steps=\([0-9]*\).*/\1/p' <<<"$ok") sum=$(sed -n 's/.*checksum=\([0-9a-f]*\).*/\1/p' <<<"$ok")
	GAP=$(sed -n 's/.*max_step_ms=\([0-9.]*\).*/\1/p' <<<"$ok")
	if [[ -z $ok ]]; then
		RESULT="FAIL: $(grep -m1 -E 'FAIL|failed' "$L/$1.err" | cut -c1-150)"
		return
	fi
	native=$(timeout 120 "$PROG_BIN" "$PROG_MOD" 0 "$steps" 2>/dev/null | sed -n 's/.*checksum=\([0-9a-f]*\).*/\1/p')
	[[ $native == "$sum" ]] && RESULT="PASS ($steps steps, checksum = native's)" || RESULT="FAIL: checksum $sum, native $native"
}

start a "$A_ADDR" "$A_ADMIN"
start b "$B_ADDR" "$B_ADMIN"
: >"$OUT/migration.md"
row "| case | session memory | pause (ms) | total (ms) | copied (GiB) | handed over (GiB) | rounds | longest step the program saw (ms) | result |"
row "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
n=0
gib() { python3 -c "import sys; print(f'{int(sys.argv[1])/2**30:.2f}')" "$1" 2>/dev/null || echo -; }
mig_case() { # G [stream [LABEL]]
	local g=$1 copy=${2:-} name=mig-$1${2:+-$2}${3:+-glob} res moved what=${3:-"migrate A->B (same GPU: memory handed over)"}
	[[ -n $copy ]] && what="migrate A->B, memory copied through the connection (copy=stream)"
	step "live migration A -> B, $g GiB ${copy:+(copy=$copy)}"
	prog $n "$g" "$name" || { row "| $what | $g GiB | | | | | | | FAIL: did not start |"; return; }
	res=$(admin a "$A_ADMIN" POST "/admin/sessions/mig-$((n + 1))/migrate" "{\"target\":\"$B_ADDR\",\"token\":\"${TB[$n]}\",\"copy\":\"$copy\"}")
	echo "$res" | tee "$L/$name.json"
	finish "$name"
	moved=$(grep -c 'session moving to' "$L/$name.err")
	row "| $what | $g GiB | $(field "$res" migration.pause_ms) | $(field "$res" migration.total_ms) | $(gib "$(field "$res" migration.copied_bytes)") | $(gib "$(field "$res" migration.handed_bytes)") | $(field "$res" migration.round) | ${GAP:--} | $RESULT; via $(field "$res" migration.via); guest redirected: $moved; $(field "$res" error | cut -c1-200) |"
}

cp_case() { # G [LABEL]
	local g=$1 name=cp-$1${2:+-glob} sid=mig-$((n + 1)) t0 t1 t2 cp rs path st restore_ms what=${2:-"checkpoint (stop) + restore on A"}
	step "checkpoint (stop) and restore on A, $g GiB"
	prog $n "$g" "$name" || { row "| checkpoint+restore | $g GiB | | | | | | | FAIL: did not start |"; return; }
	t0=$(date +%s.%N)
	cp=$(admin a "$A_ADMIN" POST "/admin/sessions/$sid/checkpoint" '{"stop":true}')
	echo "$cp" | tee "$L/$name.json"
	path=$(field "$cp" path)
	t1=$(date +%s.%N)
	rs=$(admin a "$A_ADMIN" POST /admin/restore "{\"path\":\"$path\",\"token\":\"${TA[$n]}\"}")
	echo "$rs" | tee -a "$L/$name.json"
	# Until the restored session runs; a failed restore ends it (the H100 run of 21:46 waited
	# here for minutes on one that had gone): gone twice in a row, or 60 s, ends the wait.
	local gone=0 until=$((SECONDS + 60))
	while ((SECONDS < until && gone < 2)); do
		st=$(admin a "$A_ADMIN" GET /admin/sessions | python3 -c "import json,sys; print([s['state'] for s in json.load(sys.stdin)['sessions'] if s['session_id']=='$sid'])" 2>/dev/null)
		[[ $st == "['running']" ]] && break
		[[ $st == "[]" ]] && gone=$((gone + 1))
		sleep 0.05
	done
	t2=$(date +%s.%N)
	restore_ms=$(python3 -c "print(round(($t2-$t1)*1000))")
	finish "$name"
	rm -f "$path"
	row "| $what | $g GiB | checkpoint $(field "$cp" ms), restore $restore_ms | $(python3 -c "print(round(($t2-$t0)*1000))") | file $(gib "$(field "$cp" bytes)") | - | - | ${GAP:--} | $RESULT; $(field "$cp" error | cut -c1-200) |"
}

restart_case() {
	local t0 t1
	step "SIGKILL and restart of gpuserverd A under a running program (1 GiB)"
	prog $n 1 restart || { row "| gpuserverd SIGKILL + restart | 1 GiB | | | | | | | FAIL: did not start |"; return; }
	t0=$(date +%s.%N)
	kill -9 "${PID[a]}"
	wait "${PID[a]}" 2>/dev/null
	start a "$A_ADDR" "$A_ADMIN" "${DATA[a]}"
	t1=$(date +%s.%N)
	finish restart
	row "| gpuserverd SIGKILL + restart | 1 GiB | - | $(python3 -c "print(round(($t1-$t0)*1000))") (server back) | - | - | - | ${GAP:--} | $RESULT |"
}

glob_case() { # mig or cp: the globals program moved A -> B, or checkpointed and restored
	PROG_BIN=$W/globals PROG_MOD=$W/globalkernels.fatbin
	if [[ $1 == mig ]]; then mig_case 0 "" "state in driver-placed globals (fat binary), migrate A->B"; else cp_case 0 "state in driver-placed globals (fat binary), checkpoint (stop) + restore on A"; fi
	PROG_BIN=$W/migrate PROG_MOD=$W/migkernels.ptx
}

torch_case() {
	local sid=mig-$((n + 1)) tp res cmp
	step "PyTorch training loop migrated mid-run"
	GCLIB=$W/gpucloud-lib
	[[ -d $GCLIB ]] || guest_libdir "$ROOT" "$W" "$GCLIB" >"$L/guest-libdir.log" 2>&1
	AUDIT=$ROOT/gpuserverd/guest/loader/build/libgpucloud-audit.so
	export CUBLAS_WORKSPACE_CONFIG=:4096:8
	timeout 120 python3 "$T/torch/migrate_train.py" >"$L/torch-native.out" 2>&1
	env LD_AUDIT="$AUDIT" GPUCLOUD_LIBDIR="$GCLIB" GPUCLOUD_CONFIG=/nonexistent GPUCLOUD_ENDPOINT=$A_ADDR \
		GPUCLOUD_TOKEN="${TA[$n]}" timeout "$CASE_S" python3 "$T/torch/migrate_train.py" --pause-at 40 --go "$W/go" \
		>"$L/torch-migrated.out" 2>"$L/torch-migrated.err" &
	tp=$!
	for _ in $(seq 900); do grep -q MIDWAY "$L/torch-migrated.out" && break; kill -0 $tp 2>/dev/null || break; sleep 0.1; done
	res=$(admin a "$A_ADMIN" POST "/admin/sessions/$sid/migrate" "{\"target\":\"$B_ADDR\",\"token\":\"${TB[$n]}\"}")
	echo "$res" | tee "$L/torch-migrate.json"
	touch "$W/go"
	wait $tp
	cmp=$(python3 - "$L/torch-native.out" "$L/torch-migrated.out" <<'PY'
import json, sys
def losses(p):
    return [json.loads(l)["loss"] for l in open(p) if l.startswith("{")]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
if not a or len(a) != len(b):
    print(f"FAIL: {len(b)} losses, native {len(a)}")
else:
    worst = max(abs(x - y) / max(abs(x), 1e-9) for x, y in zip(a, b))
    same = sum(x == y for x, y in zip(a, b))
    print(f"{'PASS' if worst < 1e-3 else 'FAIL'}: {len(a)} steps, {same} losses bit-equal to native, worst relative difference {worst:.2e}")
PY
)
	row "| PyTorch MLP, moved A->B at step 40 | $(field "$res" migration.total_bytes) bytes | $(field "$res" migration.pause_ms) | $(field "$res" migration.total_ms) | $(gib "$(field "$res" migration.copied_bytes)") | $(gib "$(field "$res" migration.handed_bytes)") | $(field "$res" migration.round) | - | $cmp; via $(field "$res" migration.via); $(field "$res" error | cut -c1-200) |"
}

for c in $PLAN; do
	case $c in
	mig:*) mig_case "${c#mig:}" ;;
	migs:*) mig_case "${c#migs:}" stream ;;
	cp:*) cp_case "${c#cp:}" ;;
	restart) restart_case ;;
	torch) torch_case ;;
	glob) glob_case mig ;;
	globcp) glob_case cp ;;
	*) echo "unknown case $c" ;;
	esac
	n=$((n + 1))
done

step "results"
cat "$OUT/migration.md"
grep -hE 'session moved|level=(WARN|ERROR)' "$L"/gpuserverd-*.log | tail -20
