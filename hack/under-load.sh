#!/usr/bin/env bash
# Runs a command on a loaded machine, to check that tests do not depend on its speed: one busy
# loop per core (LOAD_HOGS, default the number of cores) runs beside the command, and the
# command's Go programs get GOMAXPROCS=1 (LOAD_GOMAXPROCS) unless set. The hogs stop with it.
#   hack/under-load.sh go test -race -count=1 ./pkg/provider/
#   hack/under-load.sh make test
set -uo pipefail
if [ $# -eq 0 ]; then
	echo "usage: $0 command [args...]" >&2
	exit 2
fi
hogs=${LOAD_HOGS:-$(nproc)}
pids=()
stop() { [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null; }
trap stop EXIT
for _ in $(seq "$hogs"); do
	while :; do :; done &
	pids+=($!)
done
echo "under load: $hogs busy loop(s), GOMAXPROCS=${GOMAXPROCS:-${LOAD_GOMAXPROCS:-1}}" >&2
GOMAXPROCS=${GOMAXPROCS:-${LOAD_GOMAXPROCS:-1}} "$@"
