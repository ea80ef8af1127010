#!/usr/bin/env bash
# bench-table.sh NATIVE [REMOTE]: joins gpubench outputs ("BENCH row best median unit") into a
# Markdown table of medians: row | native | remote | remote/native. With one file it prints
# native best and median. For GB/s a ratio below 1 is slower; for µs above 1 is slower.
set -euo pipefail
awk -v two=$(( $# > 1 )) '
	$1 != "BENCH" { next }
	FNR == NR { order[++n] = $2; best[$2] = $3; nat[$2] = $4; unit[$2] = $5; next }
	{ rem[$2] = $4 }
	END {
		if (two) {
			print "| row | native | remote | remote/native | unit |"
			print "|---|---:|---:|---:|---|"
		} else {
			print "| row | best | median | unit |"
			print "|---|---:|---:|---|"
		}
		for (i = 1; i <= n; i++) {
			r = order[i]
			if (!two) { printf "| %s | %.2f | %.2f | %s |\n", r, best[r], nat[r], unit[r]; continue }
			if (r in rem && nat[r] > 0) printf "| %s | %.2f | %.2f | %.2f | %s |\n", r, nat[r], rem[r], rem[r] / nat[r], unit[r]
			else printf "| %s | %.2f | - | - | %s |\n", r, nat[r], unit[r]
		}
	}' "$@"
