#!/usr/bin/env bash
# Checks the guest library's layering: the transport objects (gpuserverd/guest/transport/) may use
# each other, the wire codec and the C library, never a symbol defined by the API files above
# them (driver/). Fails naming each upward reference.
set -euo pipefail
cd "$(dirname "$0")/../gpuserverd/guest"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc=${CC:-gcc}
compile() { # dir: objects into $tmp/dir
	mkdir -p "$tmp/$1"
	for f in "$1"/*.c; do
		"$cc" -std=gnu11 -fPIC -fvisibility=hidden -pthread -I. -c "$f" -o "$tmp/$1/$(basename "${f%.c}").o"
	done
}
compile transport
compile driver
nm --defined-only "$tmp"/driver/*.o | awk 'NF == 3 && $2 ~ /[TDBRVW]/ {print $3}' | sort -u >"$tmp/api"
bad=0
for o in "$tmp"/transport/*.o; do
	up=$(nm -u "$o" | awk '{print $2}' | sort -u | comm -12 - "$tmp/api")
	if [[ -n $up ]]; then
		echo "check-guest-layers: transport/$(basename "${o%.o}").c calls up into the API: $(echo $up)" >&2
		bad=1
	fi
done
[[ $bad == 0 ]] && echo "check-guest-layers: transport calls nothing above it"
exit $bad
