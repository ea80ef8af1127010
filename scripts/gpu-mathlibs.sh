#!/usr/bin/env bash
# gpu-mathlibs.sh: on the GPU machine, from a bundle made by scripts/mathlibs-prep.sh DEST:
#   bash DEST/scripts/gpu-mathlibs.sh          results in $OUT (default ./mathlibs-out)
# The stock PyTorch's FFTs and sparse products (torch-fft-sparse-check.py) natively, then through
# gpucloud over shared memory (gpucloud's libraries win over torch's DT_RPATH through the loader
# auditor, as in a VM), compared with the native results; then a cuRAND sample-like C program
# built against NVIDIA's curand.h, linked natively and against gpucloud's libraries: the two must
# print the same numbers. The worker runs NVIDIA's libraries from torch's wheel (cuSPARSE, cuFFT)
# and the toolkit's cuRAND (the one the native sample links), unless GPUSERVERD_* name others.
set -uo pipefail
export PATH=$PATH:/usr/local/cuda/bin
B=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-$PWD/mathlibs-out}
W=$(mktemp -d /tmp/gpu-mathlibs.XXXXXX)
SOCK=$W/gpuserverd.sock SERVER_ID=gs-mathlibs
mkdir -p "$OUT"
server=""
trap '[[ -n $server ]] && kill $server 2>/dev/null; rm -rf "$W"' EXIT
step() { printf '\n== %s (%s)\n' "$*" "$(date -u +%T)"; }
fails=0

step "machine"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}
site=$(python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
for v in CUBLAS:cu13/lib/libcublas.so.13 CUBLASLT:cu13/lib/libcublasLt.so.13 CUDNN:cudnn/lib/libcudnn.so.9 \
	CUSPARSE:cu13/lib/libcusparse.so.12 CUFFT:cu13/lib/libcufft.so.12; do
	n=GPUSERVERD_${v%%:*} f=$site/nvidia/${v#*:}
	[[ -z ${!n:-} && -e $f ]] && export "$n=$f"
	echo "worker: $n=${!n:-unset}"
done
[[ -z ${GPUSERVERD_CURAND:-} && -e $CUDA_HOME/lib64/libcurand.so.10 ]] && export GPUSERVERD_CURAND=$CUDA_HOME/lib64/libcurand.so.10
echo "worker: GPUSERVERD_CURAND=${GPUSERVERD_CURAND:-unset}"

step "start gpuserverd (cuda backend)"
uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
token=$("$B/bin/gputoken" -public-key-out "$W/key" -server "$SERVER_ID" -gpus "$uuid" -session mathlibs)
"$B/bin/gpuserverd" --backend cuda --id "$SERVER_ID" --listen 127.0.0.1:7180 --listen-unix "$SOCK" --admin 127.0.0.1:7181 \
	--public-key "$(cat "$W/key")" --data-dir "$(mktemp -d "$W/data.XXXX")" >"$OUT/gpuserverd.log" 2>&1 &
server=$!
for _ in $(seq 50); do [[ -S $SOCK ]] && break; sleep 0.2; done
REMOTE=(LD_AUDIT="$B/lib/libgpucloud-audit.so" GPUCLOUD_LIBDIR="$B/lib" GPUCLOUD_CONFIG=/nonexistent
	GPUCLOUD_ENDPOINT="unix:$SOCK" GPUCLOUD_TOKEN="$token" GPUCLOUD_SHM_MIB=256)
wait_idle() { sleep 1; } # one session at a time on a dedicated token

step "torch natively"
timeout 60 python3 "$B/scripts/torch-fft-sparse-check.py" --save "$W/native.pt" 2>&1 | tee "$OUT/torch-native.txt"
[[ ${PIPESTATUS[0]} -eq 0 ]] || fails=$((fails + 1))

step "torch through gpucloud (shared memory)"
timeout 60 env "${REMOTE[@]}" GPUCLOUD_AUDIT_LOG="$OUT/torch-loaded.txt" python3 "$B/scripts/torch-fft-sparse-check.py" \
	--compare "$W/native.pt" 2>&1 | tee "$OUT/torch-shm.txt"
[[ ${PIPESTATUS[0]} -eq 0 ]] || fails=$((fails + 1))
grep -E 'redirect (libcufft|libcusparse|libcurand|libcudart|libcuda\.)' "$OUT/torch-loaded.txt" | sort -u | head -8
wait_idle

step "cuRAND sample: native and through gpucloud"
cc=(gcc -O2 -I"$CUDA_HOME/include" "$B/src/curand_sample.c")
"${cc[@]}" -o "$W/curand_native" -L"$CUDA_HOME/lib64" -lcurand -lcudart -Wl,-rpath,"$CUDA_HOME/lib64" &&
	"${cc[@]}" -o "$W/curand_gpucloud" -L"$B/lib" -l:libcurand.so.10 -l:libcudart.so.13 -Wl,-rpath,"$B/lib" || fails=$((fails + 1))
timeout 30 "$W/curand_native" 2>&1 | tee "$OUT/curand-native.txt"
timeout 30 env "${REMOTE[@]}" "$W/curand_gpucloud" 2>&1 | tee "$OUT/curand-shm.txt"
if grep -q 'curand_sample: OK' "$OUT/curand-shm.txt" && diff <(grep mean "$OUT/curand-native.txt") <(grep mean "$OUT/curand-shm.txt"); then
	echo "PASS curand_sample: the same numbers natively and through gpucloud"
else
	echo "FAIL curand_sample"
	fails=$((fails + 1))
fi

step "notices"
cat "$OUT"/*.txt | grep -oE 'gpucloud lib[a-z]+: [A-Za-z0-9_]+ is not remoted' | sort | uniq -c
grep -iE 'level=(WARN|ERROR)' "$OUT/gpuserverd.log" | tail -5
step "done: $fails failed step(s)"
exit 0
