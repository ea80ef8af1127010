#!/usr/bin/env bash
# Installs the console's third-party browser libraries (web/vendor/package.json, pinned by its
# package-lock.json) with npm ci and copies the files the console loads into
# web/static/vendor/, which go:embed puts into the apiserver. Not in git: build outputs of
# another project. Without npm the console still works; its interactive terminal says it is not
# installed.
set -euo pipefail
cd "$(dirname "$0")/../web/vendor"
dest=../static/vendor/xterm
if ! command -v npm >/dev/null; then
  echo "web-vendor: npm not found: the console's terminal (xterm.js) is not installed" >&2
  exit 0
fi
lock=$(sha256sum package-lock.json | cut -c1-16)
if [ -f "$dest/.lock-$lock" ]; then exit 0; fi
npm ci --no-audit --no-fund --silent
rm -rf "$dest" && mkdir -p "$dest"
cp node_modules/@xterm/xterm/lib/xterm.js node_modules/@xterm/xterm/css/xterm.css node_modules/@xterm/xterm/LICENSE "$dest/"
touch "$dest/.lock-$lock"
echo "web-vendor: xterm.js $(node -p "require('./node_modules/@xterm/xterm/package.json').version" 2>/dev/null) in web/static/vendor/xterm"
