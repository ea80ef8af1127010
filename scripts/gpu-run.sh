#!/usr/bin/env bash
# The scripted run on the GPU machine (H100, CUDA 13, nvcc; no Go there).
#
#   1. builds the driver-API programs in gpuserverd/guest/gputests with nvcc;
#   2. runs vecadd, matmul and gpubench natively;
#   3. runs the Go test binaries of the cuda backend and the NVML inventory, if given
#      (built elsewhere: CGO_ENABLED=1 go test -c -o bin/cuda.test ./gpuserverd/backend/cuda),
#      and the cuda backend's Go benchmarks;
#   4. if a gpuserverd binary and the guest library are given, starts gpuserverd on the cuda
#      backend with a token from cmd/gputoken, runs the same binaries through the guest library,
#      unmodified, and prints row, native, remote, ratio.
#
# scripts/gpu-prep.sh DEST builds every binary this needs (on a machine with Go) and bundles them
# with this script for the GPU machine; then run: bash DEST/scripts/gpu-run.sh
#
# Environment (all optional):
#   OUT             where results go (default ./gpu-run-out)
#   CUDA_TEST       cuda backend test binary        (default $ROOT/bin/cuda.test)
#   INVENTORY_TEST  inventory test binary           (default $ROOT/bin/inventory.test)
#   GPUSERVERD      gpuserverd binary               (default $ROOT/bin/gpuserverd)
#   GUEST_LIBDIR    folder holding the guest libcuda.so.1 (default $ROOT/gpuserverd/guest/build)
#   GPUTOKEN        gputoken binary                 (default $ROOT/bin/gputoken)
#   GPUSERVERD_FLAGS  gpuserverd's flags; filled in: {ADDR} listen address, {ADMIN} its admin HTTP
#                   address (GET /metrics tells when a session ended), {SERVER} server id,
#                   {PUBKEY} the base64 public key, {KEY} the file holding it, {DATA} a fresh folder
#   GUEST_ENV       the guest library's settings, as NAME=value words; {ADDR} {TOKEN} are filled in
#   BENCH_MODE      "quick" for a smoke run of gpubench
#   GO_BENCH        0 to skip the cuda backend's Go benchmarks
#   PROGRAM_TIMEOUT seconds each program may run (default 180)
#   TCPPROBE_MIB    MiB the loopback TCP probe moves per stream count (default 2048)
#   DRIVER_PROGRAMS 0 to skip vecadd, matmul and gpubench (and the table)
#   RT              0 to skip the runtime-API programs (rt_*.cu, built with -cudart shared and
#                   static, and cuBLAS); each prints PASS/FAIL native and remote, summed up in
#                   $OUT/rt-results.txt
#                   The remote+gccudart runs also find gpucloud's libcublas.so.13 (gpuserverd/guest/cublas,
#                   built here), so cuBLAS programs run remoted; rt_gemmbench's GFLOP/s, native and
#                   remote, go to $OUT/gemm.md
#   GPUSERVERD_CUBLAS  NVIDIA's libcublas for gpuserverd's workers (default: the toolkit's lib64)
#   RT_TRACE        1 to run the remote rt programs with GPUCLOUD_TRACE=1 (logs in $OUT/rt-*.log)
#   RT_GUEST_ENV    extra guest settings for the remote rt programs (NAME=value words)
#   SHM             0 to skip gpubench over shared memory (gpuserverd's Unix socket {SOCK},
#                   GPUCLOUD_ENDPOINT=unix:...; table in $OUT/table-shm.md)
#   FAIR            0 to skip the fair-share measurement (fairshare: four busy sessions, then one
#                   busy among three idle), natively and through gpuserverd on the shared tier
#   FAIR_SECONDS    seconds per fairshare phase (default 4)
#   SHM_MIB         the shared arena of the shm gpubench run (default 512: its 256 MiB pinned rows fit)
#   IVSHMEM         0 to skip gpubench over a VM-style ivshmem channel between two processes: a
#                   channel file in /dev/shm served by gpuserverd --ivshmem-dir {IVDIR}, the guest
#                   library mapping it (GPUCLOUD_ENDPOINT=ivshmem:FILE) as a VM maps the device's
#                   BAR; polling doorbells instead of futexes (table in $OUT/table-ivshmem.md)
#   IVSHMEM_MIB     that channel's size (default 2048, a power of two: gpuserverd splits it into 4
#                   slots of 512 MiB, one per process; gpubench's 256 MiB pinned rows fit in one,
#                   and its registered rows are zero-copy there too)
set -uo pipefail
export PATH=$PATH:/usr/local/cuda/bin

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-$PWD/gpu-run-out}
BUILD=${BUILD:-/tmp/gputests-build}
CUDA_TEST=${CUDA_TEST:-$ROOT/bin/cuda.test}
INVENTORY_TEST=${INVENTORY_TEST:-$ROOT/bin/inventory.test}
GPUSERVERD=${GPUSERVERD:-$ROOT/bin/gpuserverd}
GUEST_LIBDIR=${GUEST_LIBDIR:-$ROOT/gpuserverd/guest/build}
GPUTOKEN=${GPUTOKEN:-$ROOT/bin/gputoken}
ADDR=${ADDR:-127.0.0.1:7070}
ADMIN=${ADMIN:-127.0.0.1:7071}
SOCK=${SOCK:-/tmp/gpuserverd-gpurun.sock}
SERVER_ID=${SERVER_ID:-gs-gpurun}
# (Not ${VAR:-default}: the braces of the placeholders would end the expansion early.)
if [[ -z ${GPUSERVERD_FLAGS:-} ]]; then
	GPUSERVERD_FLAGS='--backend cuda --id {SERVER} --listen {ADDR} --listen-unix {SOCK} --ivshmem-dir {IVDIR} --admin {ADMIN} --public-key {PUBKEY} --data-dir {DATA}'
fi
if [[ -z ${GUEST_ENV:-} ]]; then
	GUEST_ENV='GPUCLOUD_ENDPOINT={ADDR} GPUCLOUD_TOKEN={TOKEN}'
fi
BENCH_MODE=${BENCH_MODE:-}
mkdir -p "$OUT"
rm -f "$OUT/rt-results.txt"
status=0

step() { printf '\n== %s\n' "$*"; }
fail() { echo "FAILED: $*"; status=1; }

step "machine"
nvidia-smi --query-gpu=name,uuid,driver_version,memory.total,pci.bus_id --format=csv,noheader || fail "nvidia-smi"
nvcc --version | tail -2

step "build (nvcc)"
if [[ ${DRIVER_PROGRAMS:-1} != 0 ]]; then
	make -s -C "$ROOT/gpuserverd/guest/gputests" BUILD="$BUILD" || { fail "build"; exit 1; }
fi
GCCUDART=""
GCCUBLAS=""
# gpuserverd's workers (and the cuda backend's tests) load NVIDIA's cuBLAS for remoted cuBLAS
# calls: the toolkit's, wherever the loader would not find it.
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}
if [[ -z ${GPUSERVERD_CUBLAS:-} && -e $CUDA_HOME/lib64/libcublas.so.13 ]]; then
	export GPUSERVERD_CUBLAS=$CUDA_HOME/lib64/libcublas.so.13
fi
if [[ ${RT:-1} != 0 ]]; then
	make -s -j8 -k -C "$ROOT/gpuserverd/guest/gputests" BUILD="$BUILD" rt || fail "build rt"
	# gpucloud's own libcudart.so.13, for the -cudart shared programs (NVIDIA's runtime only starts
	# on NVIDIA's driver): built here, against the toolkit's headers.
	if [[ -f $ROOT/gpuserverd/guest/cudart/Makefile ]]; then
		make -s -C "$ROOT/gpuserverd/guest/cudart" BUILD="$BUILD/gccudart" && GCCUDART=$BUILD/gccudart || fail "build gpucloud libcudart"
	fi
	# gpucloud's libcublas.so.13 (cuBLAS remoted to gpuserverd), for the remote+gccudart runs.
	if [[ -f $ROOT/gpuserverd/guest/cublas/Makefile ]]; then
		make -s -C "$ROOT/gpuserverd/guest/cublas" BUILD="$BUILD/gccublas" && GCCUBLAS=$BUILD/gccublas || fail "build gpucloud libcublas"
	fi
fi
ls -l "$BUILD"

if [[ ${RT:-1} != 0 ]]; then
	# What NVIDIA's driver itself answers for the private tables its runtime fetches (natively).
	step "export tables (native driver)"
	make -s -C "$ROOT/gpuserverd/guest/gputests" BUILD="$BUILD" "$BUILD/exportprobe" &&
		"$BUILD/exportprobe" | tee "$OUT/exportprobe.txt" || fail "exportprobe"
fi

# run_rt runs every runtime-API program built; $1 = label (native/remote). With gpucloud's
# libcudart built, the -cudart shared programs run a second time on it (label native+gccudart,
# remote+gccudart): the same binaries, the loader finding our libcudart.so.13 first.
run_rt() {
	local label=$1 limit=${PROGRAM_TIMEOUT:-180} p name rc runs
	runs=("$BUILD"/rt_*_shared "$BUILD"/rt_*_static)
	[[ -n $GCCUDART ]] && runs+=("$BUILD"/rt_*_shared)
	local seen=" "
	for p in "${runs[@]}"; do
		[[ -x $p ]] || continue
		name=$(basename "$p")
		local lab=$label
		if [[ $seen == *" $name "* ]]; then
			lab=$label+gccudart
			name=$name
		fi
		seen+="$name "
		settle
		if [[ $lab == *gccudart ]]; then
			# shellcheck disable=SC2086 # words on purpose
			# Remotely our libcublas too (NVIDIA's carries NVIDIA's runtime, which does not start on
			# the guest library); natively NVIDIA's (ours needs gpuserverd).
			local ours=$GCCUDART
			[[ $label == remote && -n $GCCUBLAS ]] && ours=$GCCUDART:$GCCUBLAS
			(cd "$BUILD" && env LD_LIBRARY_PATH=$ours${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} $([[ $label == remote ]] && echo ${RT_GUEST_ENV:-}) $([[ $label == remote && ${RT_TRACE:-0} == 1 ]] && echo GPUCLOUD_TRACE=1) timeout "$limit" "$p") >"$OUT/rt-$lab-$name.log" 2>&1
		elif [[ $label == remote ]]; then
			# shellcheck disable=SC2086 # words on purpose
			(cd "$BUILD" && env ${RT_GUEST_ENV:-} $([[ ${RT_TRACE:-0} == 1 ]] && echo GPUCLOUD_TRACE=1) timeout "$limit" "$p") >"$OUT/rt-$label-$name.log" 2>&1
		else
			(cd "$BUILD" && timeout "$limit" "$p") >"$OUT/rt-$label-$name.log" 2>&1
		fi
		rc=$?
		if [[ $rc -eq 0 ]]; then
			echo "PASS $lab $name" | tee -a "$OUT/rt-results.txt"
		else
			echo "FAIL $lab $name (exit $rc): $(grep -v '^gpucloud-trace' "$OUT/rt-$lab-$name.log" | tail -2 | tr '\n' ' ')" | tee -a "$OUT/rt-results.txt"
			fail "$lab $name"
		fi
	done
}

run_programs() { # $1 = label (native/remote); the caller sets the environment
	local label=$1 limit=${PROGRAM_TIMEOUT:-180}
	[[ ${RT:-1} != 0 ]] && run_rt "$label"
	[[ ${DRIVER_PROGRAMS:-1} == 0 ]] && return
	settle
	(cd "$BUILD" && timeout "$limit" ./vecadd kernels.ptx) || fail "$label vecadd"
	settle
	(cd "$BUILD" && timeout "$limit" ./matmul kernels.cubin) || fail "$label matmul"
	settle
	(cd "$BUILD" && timeout "$limit" ./gpubench kernels.ptx $BENCH_MODE) | tee "$OUT/bench-$label.txt" || fail "$label gpubench"
}

settle() { :; } # natively nothing to wait for

# sessions_active reads gpuserverd's gauge from its admin /metrics (bash's /dev/tcp: no curl needed),
# with the admin token gpuserverd wrote into its data folder.
sessions_active() {
	local reply auth=""
	[[ -f ${SERVER_DATA:-}/admin-token ]] && auth="Authorization: Bearer $(cat "$SERVER_DATA/admin-token")"
	reply=$( { exec 3<>"/dev/tcp/${ADMIN%:*}/${ADMIN##*:}" && printf 'GET /metrics HTTP/1.0\r\n%s\r\n\r\n' "$auth" >&3 && cat <&3; } 2>/dev/null) || return 1
	sed -n 's/^gpuserverd_sessions_active \([0-9]*\).*/\1/p' <<<"$reply"
}

# wait_idle waits (up to 5 s) until the last program's session has ended: a dedicated-tier GPU
# is refused to a new session while the previous worker is still tearing down.
wait_idle() {
	for _ in $(seq 50); do
		[[ $(sessions_active) == 0 ]] && return
		sleep 0.1
	done
	echo "warning: gpuserverd still reports active sessions"
}

# start_server KEYFILE LOGNAME starts gpuserverd with GPUSERVERD_FLAGS filled in and waits until
# its admin address answers (probing ADDR would log a failed handshake).
start_server() {
	local data flags
	data=$(mktemp -d)
	SERVER_DATA=$data
	flags=${GPUSERVERD_FLAGS//\{KEY\}/$1}
	flags=${flags//\{PUBKEY\}/$(cat "$1")}
	flags=${flags//\{DATA\}/$data}
	flags=${flags//\{ADDR\}/$ADDR}
	flags=${flags//\{SOCK\}/$SOCK}
	flags=${flags//\{SERVER\}/$SERVER_ID}
	flags=${flags//\{ADMIN\}/$ADMIN}
	flags=${flags//\{IVDIR\}/$IVDIR}
	# shellcheck disable=SC2086 # flags are words on purpose
	"$GPUSERVERD" $flags >"$OUT/$2.log" 2>&1 &
	server=$!
	for _ in $(seq 50); do
		[[ -n $(sessions_active) ]] && break
		sleep 0.2
	done
}

# The channel of gputoken's default instance, in tmpfs: the driver pins shmem pages, not a
# disk file's. gpuserverd serves it from its start.
IVDIR=$(mktemp -d /dev/shm/gpurun-ivshmem.XXXXXX)
CHANNEL=$IVDIR/gpucloud-instance-gputest
install -m 600 /dev/null "$CHANNEL" && truncate -s "${IVSHMEM_MIB:-2048}M" "$CHANNEL"
trap 'rm -rf "$IVDIR"' EXIT

# wait_channel waits (up to 10 s) until gpuserverd has the channel's first slot free for a claim
# (its header's state word, gpuserverd/ivshmem).
wait_channel() {
	for _ in $(seq 100); do
		[[ $(od -An -tu4 -j 4108 -N4 "$CHANNEL" | tr -d ' ') == 1 ]] && return 0
		sleep 0.1
	done
	return 1
}

stop_server() {
	kill "$server" 2>/dev/null
	wait "$server" 2>/dev/null
}

step "loopback TCP ceiling (tcpprobe: GB/s by number of streams)"
timeout 120 "$BUILD/tcpprobe" ${TCPPROBE_MIB:-2048} | tee "$OUT/tcpprobe.txt" || fail "tcpprobe"

step "native programs"
run_programs native
if [[ ${FAIR:-1} != 0 && ${DRIVER_PROGRAMS:-1} != 0 ]]; then
	step "fair share natively (four processes, each its own context, time-sliced by the driver)"
	(cd "$BUILD" && timeout 120 ./fairshare kernels.ptx "${FAIR_SECONDS:-4}") 2>&1 | grep -v '^device 0' | tee "$OUT/fair-native.txt" || fail "fairshare native"
fi

for t in "$CUDA_TEST" "$INVENTORY_TEST"; do
	if [[ -x $t ]]; then
		step "Go tests: $(basename "$t")"
		"$t" -test.v -test.count=1 -test.timeout=120s 2>&1 | tee "$OUT/$(basename "$t").log" | grep -E '^(--- |PASS|FAIL|ok|\s+\S+_test.go)'
		[[ ${PIPESTATUS[0]} -eq 0 ]] || fail "$(basename "$t")"
	else
		echo "skip: no test binary at $t"
	fi
done

if [[ -x $CUDA_TEST && ${GO_BENCH:-1} == 1 ]]; then
	step "Go benchmarks of the cuda backend (cgo + context binding, no network)"
	"$CUDA_TEST" -test.run '^$' -test.bench . -test.benchtime 1s -test.count 3 | tee "$OUT/cuda-bench.txt" || fail "cuda benchmarks"
fi

remote=0
if [[ -x $GPUSERVERD && -e $GUEST_LIBDIR/libcuda.so.1 && -x $GPUTOKEN ]]; then
	step "remote programs (gpuserverd --backend cuda, guest library $GUEST_LIBDIR)"
	key=$(mktemp)
	uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
	token=$("$GPUTOKEN" -public-key-out "$key" -server "$SERVER_ID" -gpus "$uuid") || fail "gputoken"
	start_server "$key" gpuserverd
	genv=${GUEST_ENV//\{ADDR\}/$ADDR}
	genv=${genv//\{TOKEN\}/$token}
	# shellcheck disable=SC2086
	export $genv
	export LD_LIBRARY_PATH=$GUEST_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	settle() { wait_idle; }
	run_programs remote
	if [[ ${SHM:-1} != 0 && ${DRIVER_PROGRAMS:-1} != 0 ]]; then
		step "gpubench over shared memory (GPUCLOUD_ENDPOINT=unix:$SOCK)"
		settle
		(cd "$BUILD" && GPUCLOUD_ENDPOINT=unix:$SOCK GPUCLOUD_SHM_MIB=${SHM_MIB:-512} timeout "${PROGRAM_TIMEOUT:-180}" ./gpubench kernels.ptx $BENCH_MODE) | tee "$OUT/bench-remote-shm.txt" || fail "shm gpubench"
		settle
		(cd "$BUILD" && GPUCLOUD_ENDPOINT=unix:$SOCK timeout "${PROGRAM_TIMEOUT:-180}" ./vecadd kernels.ptx) || fail "shm vecadd"
	fi
	if [[ ${IVSHMEM:-1} != 0 && ${DRIVER_PROGRAMS:-1} != 0 ]]; then
		step "gpubench over an ivshmem channel file (GPUCLOUD_ENDPOINT=ivshmem:$CHANNEL, polling doorbells)"
		settle
		wait_channel || fail "gpuserverd does not serve $CHANNEL"
		(cd "$BUILD" && GPUCLOUD_ENDPOINT=ivshmem:$CHANNEL timeout "${PROGRAM_TIMEOUT:-180}" ./gpubench kernels.ptx $BENCH_MODE) | tee "$OUT/bench-remote-ivshmem.txt" || fail "ivshmem gpubench"
		settle
		wait_channel || fail "the channel was not freed after gpubench"
		(cd "$BUILD" && GPUCLOUD_ENDPOINT=ivshmem:$CHANNEL timeout "${PROGRAM_TIMEOUT:-180}" ./vecadd kernels.ptx) || fail "ivshmem vecadd"
	fi
	unset LD_LIBRARY_PATH
	stop_server
	remote=1
	if [[ ${FAIR:-1} != 0 ]]; then
		# Shared-tier sessions, one token each, under a key of their own: a fresh server.
		step "fair share through gpuserverd (four shared-tier sessions over TCP)"
		fkey=$(mktemp)
		ftokens=$("$GPUTOKEN" -public-key-out "$fkey" -server "$SERVER_ID" -gpus "$uuid" -tier shared -quota 8589934592 -session fair -count 4 | tr '\n' ' ') || fail "gputoken -count"
		start_server "$fkey" gpuserverd-fair
		(cd "$BUILD" && env LD_LIBRARY_PATH=$GUEST_LIBDIR GPUCLOUD_ENDPOINT=$ADDR FAIRSHARE_TOKENS="$ftokens" GPUCLOUD_LANES=1 timeout 120 ./fairshare kernels.ptx "${FAIR_SECONDS:-4}") 2>&1 | grep -v '^device 0' | tee "$OUT/fair-remote.txt" || fail "fairshare remote"
		stop_server
	fi
else
	echo "skip remote: need GPUSERVERD ($GPUSERVERD), GUEST_LIBDIR/libcuda.so.1 ($GUEST_LIBDIR) and GPUTOKEN ($GPUTOKEN)"
fi

# gemm_table: rt_gemmbench's GFLOP/s, NVIDIA's cuBLAS natively against gpucloud's remoted one.
gemm_table() {
	local nat=$OUT/rt-native-rt_gemmbench_shared.log rem=$OUT/rt-remote+gccudart-rt_gemmbench_shared.log
	[[ -f $nat ]] || return 0
	echo "| SGEMM n | native events | native wall | remote events | remote wall | remote/native (wall) |"
	echo "| --- | --- | --- | --- | --- | --- |"
	local n ne nw re rw
	while read -r _ _ n _ ne _ nw _; do
		read -r re rw < <(awk -v n="$n" '$1 == "GEMM" && $3 == n {print $5, $7}' "$rem" 2>/dev/null)
		echo "| $n | $ne | $nw | ${re:--} | ${rw:--} | $([[ -n ${rw:-} ]] && awk -v a="$rw" -v b="$nw" 'BEGIN {printf "%.2f", a / b}' || echo -) |"
	done < <(grep '^GEMM sgemm' "$nat")
}
if [[ ${RT:-1} != 0 ]]; then
	step "cuBLAS SGEMM, GFLOP/s (rt_gemmbench: NVIDIA's natively, gpucloud's libcublas remoted)"
	gemm_table | tee "$OUT/gemm.md"
fi

step "table (median of repetitions)"
[[ -f $OUT/bench-native.txt ]] && "$ROOT/scripts/bench-table.sh" "$OUT/bench-native.txt" $( ((remote)) && echo "$OUT/bench-remote.txt") | tee "$OUT/table.md"
if [[ -f $OUT/bench-remote-shm.txt ]]; then
	step "table: native vs shared memory"
	"$ROOT/scripts/bench-table.sh" "$OUT/bench-native.txt" "$OUT/bench-remote-shm.txt" | tee "$OUT/table-shm.md"
fi
if [[ -f $OUT/bench-remote-ivshmem.txt ]]; then
	step "table: native vs ivshmem channel (compare launch_sync with table-shm.md: polling vs futex)"
	"$ROOT/scripts/bench-table.sh" "$OUT/bench-native.txt" "$OUT/bench-remote-ivshmem.txt" | tee "$OUT/table-ivshmem.md"
fi
echo
[[ $status -eq 0 ]] && echo "gpu-run: all passed" || echo "gpu-run: FAILURES above"
exit $status
