#!/usr/bin/env bash
# Checks the go command before anything uses it, so that a missing or too old Go gives one clear
# message instead of a compiler error further on.
set -uo pipefail
cd "$(dirname "$0")/.."
need=$(awk '$1 == "go" { print $2; exit }' go.mod)
if ! command -v go >/dev/null 2>&1; then
	echo "Go is not installed, or not on PATH. Install Go $need or newer (https://go.dev/dl/) and run make again."
	exit 1
fi
# In this module, go switches to the toolchain go.mod needs if it is allowed to download it.
if ! have=$(go env GOVERSION 2>/dev/null); then
	go env GOVERSION 2>&1 | tail -n 3
	echo "The go command on PATH ($(command -v go)) cannot build this project, which needs Go $need or newer: install a newer Go (https://go.dev/dl/), or let it fetch one (GOTOOLCHAIN=auto, with access to the Go module proxy), and run make again."
	exit 1
fi
have=${have#go}
have=${have%% *}
if [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -n1)" != "$need" ]; then
	echo "Go $have is too old: this project needs Go $need or newer. Install a newer Go (https://go.dev/dl/) and run make again."
	exit 1
fi
