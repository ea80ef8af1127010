#!/usr/bin/env bash
# The generic path (apigen) against NVIDIA's driver: gencalls natively, then through gpuserverd
# --backend cuda and gpucloud's guest libcuda.so.1; the outputs compared.
set -u
# Usage: D=folder holding bin/{gencalls,gpuserverd,gputoken} and lib/libcuda.so.1 (built on a machine
# with Go: go build ./cmd/gpuserverd ./cmd/gputoken; make -C gpuserverd/guest; gcc
# gpuserverd/guest/gputests/gencalls.c -Igpuserverd/guest/include -lcuda), OUT=results folder.
D=${D:-$(cd "$(dirname "$0")" && pwd)}
OUT=${OUT:-$(mktemp -d)}
nvidia-smi -L
echo "== native"; "$D/bin/gencalls" >"$OUT/native.txt" 2>&1; echo "rc=$?" >>"$OUT/native.txt"; cat "$OUT/native.txt"
key=$(mktemp); uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
token=$("$D/bin/gputoken" -public-key-out "$key" -server gs-gen -gpus "$uuid")
data=$(mktemp -d)
"$D/bin/gpuserverd" --backend cuda --id gs-gen --listen 127.0.0.1:7070 --listen-unix /tmp/gs-gen.sock --admin 127.0.0.1:7071 \
	--public-key "$(cat "$key")" --data-dir "$data" >"$OUT/gpuserverd.log" 2>&1 &
srv=$!
sleep 4
echo "== remote"
LD_LIBRARY_PATH=$D/lib GPUCLOUD_ENDPOINT=127.0.0.1:7070 GPUCLOUD_TOKEN=$token GPUCLOUD_CONFIG=/nonexistent \
	timeout 60 "$D/bin/gencalls" >"$OUT/remote.txt" 2>&1; echo "rc=$?" >>"$OUT/remote.txt"; cat "$OUT/remote.txt"
echo "== diff native remote"; diff "$OUT/native.txt" "$OUT/remote.txt"
kill "$srv"; sleep 1
tail -20 "$OUT/gpuserverd.log"
