#!/usr/bin/env bash
# hack/first-run.sh TARGET [COMMIT]: how long a first `make TARGET` (demo or test) takes. It clones
# this repository (at COMMIT, default HEAD) into a new directory, points GOCACHE and GOMODCACHE at
# new empty directories, runs make TARGET there and prefixes each line of its output with the
# seconds since the start. Nothing else should run meanwhile. The stamped log is in the printed
# directory, which the caller removes (the caches take several GiB).
set -euo pipefail
target=${1:?usage: hack/first-run.sh demo|test [commit]}
commit=${2:-HEAD}
repo=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d "${TMPDIR:-/tmp}/first-run-XXXXXX")
git clone -q "$repo" "$dir/clone"
git -C "$dir/clone" checkout -q "$commit"
cd "$dir/clone"
export GOCACHE=$dir/gocache GOMODCACHE=$dir/gomodcache
echo "make $target from a fresh clone of $(git log --oneline -1) with empty Go caches; log: $dir/log"
start=$(date +%s%N)
set +e
make "$target" 2>&1 | while IFS= read -r line; do
	printf '%7.1f %s\n' "$(( $(date +%s%N) - start ))e-9" "$line"
done | tee "$dir/log"
status=${PIPESTATUS[0]}
printf 'make %s exited %d after %.1f s\n' "$target" "$status" "$(( $(date +%s%N) - start ))e-9" | tee -a "$dir/log"
# The module cache's files are read-only; go clean removes them.
go clean -modcache >/dev/null 2>&1
exit "$status"
