#!/usr/bin/env bash
# Fails when a build output (an ELF object, executable or shared library) is tracked by git:
# binaries are built by the project's scripts, never committed.
set -euo pipefail
cd "$(dirname "$0")/.."
bad=0
while IFS= read -r -d '' f; do
  [ -f "$f" ] || continue
  if [ "$(head -c 4 "$f" | od -An -tx1 | tr -d ' \n')" = "7f454c46" ]; then
    echo "check-no-binaries: $f is an ELF build output; remove it from git and ignore it" >&2
    bad=1
  fi
done < <(git ls-files -z)
exit $bad
