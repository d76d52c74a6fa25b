#!/usr/bin/env bash
# hack/download-modules.sh DIR...: downloads the Go modules of each module directory, all at once
# (the downloads wait on the network, not on the CPU, so together they take about as long as the
# largest alone). Quiet: one line with how many modules are ready; go's output is in
# bin/go-mod-download.json and .log, shown only if a download fails.
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p bin
printf 'Go modules: '
pids=()
for dir in "$@"; do
	name=${dir//\//_}
	(cd "$dir" && go mod download -json) >"bin/.go-mod-download-$name.json" 2>"bin/.go-mod-download-$name.log" &
	pids+=($!)
done
failed=()
for i in "${!pids[@]}"; do
	wait "${pids[$i]}" || failed+=("${*:$((i + 1)):1}")
done
cat bin/.go-mod-download-*.json >bin/go-mod-download.json
cat bin/.go-mod-download-*.log >bin/go-mod-download.log
rm -f bin/.go-mod-download-*
if [ "${#failed[@]}" -gt 0 ]; then
	echo
	{ grep -h '"Error"' bin/go-mod-download.json; cat bin/go-mod-download.log; } | head -n 5
	echo "Could not download the Go modules of ${failed[*]} (the first errors above; all in bin/go-mod-download.json and .log): is the Go module proxy reachable (GOPROXY=$(go env GOPROXY))?"
	exit 1
fi
echo "$(grep '"Path"' bin/go-mod-download.json | sort -u | wc -l) ready (log: bin/go-mod-download.log)"
