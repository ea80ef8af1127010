#!/usr/bin/env bash
# Runs every Go fuzz target in the repository (every package, found by `func Fuzz...` in its
# _test.go files) for a short while each: the decoders a tenant, a VM or a daemon can reach are
# fuzzed in CI, not only when someone remembers (issue 13). A failure leaves its input under
# the package's testdata/fuzz/, which `go test` then replays as a regression case.
#
#   FUZZTIME=3s scripts/fuzz-short.sh      # time per target (default 2s; 24 targets, 48 s of fuzzing)
#   FUZZ_ONLY=wire scripts/fuzz-short.sh   # only packages whose path contains this
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${FUZZTIME:-2s}"
failed=()
n=0
while IFS= read -r file; do
	dir="./$(dirname "${file#./}")"
	[[ -n "${FUZZ_ONLY:-}" && "$dir" != *"$FUZZ_ONLY"* ]] && continue
	for target in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*testing\.F).*/\1/p' "$file"); do
		n=$((n + 1))
		echo "fuzz $dir $target ($fuzztime)"
		if ! go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$dir" >"/tmp/fuzz-short.$$.log" 2>&1; then
			cat "/tmp/fuzz-short.$$.log"
			# go test -fuzz may end a short run with "context deadline exceeded" when a loaded
			# machine's worker answers after the deadline; that found nothing. A found failure
			# says "Failing input written to testdata/fuzz/...".
			if grep -q 'context deadline exceeded' "/tmp/fuzz-short.$$.log" && ! grep -q 'Failing input' "/tmp/fuzz-short.$$.log"; then
				echo "fuzz-short: $dir $target: the fuzzer's deadline passed before a worker answered (a loaded machine); nothing found"
			else
				failed+=("$dir $target")
			fi
		fi
	done
done < <(grep -rl --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]*\(' . | grep -v '/node_modules/' | sort)
rm -f "/tmp/fuzz-short.$$.log"
if [[ $n -eq 0 ]]; then
	echo "fuzz-short: no fuzz targets found" >&2
	exit 1
fi
if [[ ${#failed[@]} -gt 0 ]]; then
	printf 'fuzz-short: FAILED %s\n' "${failed[@]}" >&2
	exit 1
fi
echo "fuzz-short: $n targets, none failed"
