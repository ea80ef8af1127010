#!/usr/bin/env bash
# Old and new billingbench, interleaved, so both see the same load on a shared machine.
#
#   scripts/bench-billing-ab.sh OLD_COMMIT [ROUNDS] -- BILLINGBENCH_ARGS...
#
# Builds cmd/billingbench twice from the work tree's harness (cmd/billingbench, the same
# measurement on both sides): once over the billing packages and migrations of OLD_COMMIT (from
# `git archive`, so the work tree is untouched), once over the work tree's; then runs old, new,
# old, new... ROUNDS times each (default 2), printing the time, the load average and each run's
# summary lines.
set -euo pipefail
old=$1
shift
rounds=2
if [[ ${1:-} != -- ]]; then
	rounds=$1
	shift
fi
[[ ${1:-} == -- ]] && shift
dir=$(mktemp -d /tmp/billing-ab.XXXXXX)
trap 'rm -rf "$dir"' EXIT
mkdir "$dir/src"
git archive "$old" | tar -x -C "$dir/src"
rm -rf "$dir/src/cmd/billingbench"
cp -r cmd/billingbench "$dir/src/cmd/billingbench"
(cd "$dir/src" && go build -o "$dir/old" ./cmd/billingbench)
go build -o "$dir/new" ./cmd/billingbench
echo "old: $(git rev-parse --short "$old"), new: $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' + work tree'); args: $*"
for ((i = 1; i <= rounds; i++)); do
	for side in old new; do
		echo "== $side $(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1-3 /proc/loadavg)"
		"$dir/$side" "$@" 2>&1 | grep -v '^  [0-9]* records'
	done
done
