#!/usr/bin/env bash
# Fails when `go generate` would change a tracked file.
set -euo pipefail
git diff --quiet --exit-code || { echo "check-generated: skipped (uncommitted changes)"; exit 0; }
go generate ./...
if ! git diff --quiet --exit-code; then
  echo "check-generated: generated files are stale; run 'make generate' and commit:" >&2
  git --no-pager diff --stat >&2
  git checkout -- . 
  exit 1
fi
