#!/usr/bin/env bash
# make test: every stage CI runs, in order, each ending with one summary line and its duration.
# The quiet stages (module checks, builds, lint) show their output only when they fail; the test
# stages show go test's line per package as it finishes. Logs are in bin/test-logs/.
set -uo pipefail
cd "$(dirname "$0")/.."

logs=bin/test-logs
mkdir -p "$logs"
total_start=$SECONDS
summary=()

# finish prints a stage's summary line and remembers it for the end.
finish() {
	local name=$1 status=$2 start=$3 detail=${4:-}
	local line
	line=$(printf '%-12s %-4s %5ss%s' "$name" "$status" $((SECONDS - start)) "${detail:+  $detail}")
	echo "== $line"
	summary+=("$line")
}

fail() {
	echo
	echo "make test failed in stage '$1' after $((SECONDS - total_start))s; its log: $2"
	exit 1
}

# quiet runs a stage whose output matters only when it fails.
quiet() {
	local name=$1
	shift
	local start=$SECONDS log="$logs/$name.log"
	if "$@" >"$log" 2>&1; then
		finish "$name" ok "$start"
	else
		cat "$log"
		finish "$name" FAIL "$start"
		fail "$name" "$log"
	fi
}

# tests runs go test on the named packages, showing its line per package.
tests() {
	local name=$1
	shift
	local start=$SECONDS log="$logs/$name.log"
	if [ $# -eq 0 ]; then
		finish "$name" ok "$start" "no packages"
		return
	fi
	go test -race -count=1 -timeout 30m "$@" 2>&1 | tee "$log" | grep -v '\[no test files\]$'
	local status=${PIPESTATUS[0]}
	if [ "$status" -eq 0 ]; then
		finish "$name" ok "$start" "$# package(s)"
	else
		finish "$name" FAIL "$start" "$# package(s)"
		fail "$name" "$log"
	fi
}

# shown runs a stage whose progress the user should see.
shown() {
	local name=$1
	shift
	local start=$SECONDS log="$logs/$name.log"
	"$@" 2>&1 | tee "$log"
	if [ "${PIPESTATUS[0]}" -eq 0 ]; then
		finish "$name" ok "$start"
	else
		finish "$name" FAIL "$start"
		fail "$name" "$log"
	fi
}

# fuzz runs each fuzz target (func Fuzz... in a _test.go file) beyond its seed corpus, which the
# test stages run as plain tests, for FUZZTIME each: by default 10,000 inputs (1-8 s here). A
# count, not a duration: with a duration, Go before 1.27 can fail a target with "context deadline
# exceeded" when the time runs out while a worker is busy (go.dev/issue/75804), with no failing
# input found.
fuzz() {
	local start=$SECONDS log="$logs/fuzz.log" count=0 file target
	: >"$log"
	while IFS=: read -r file target; do
		echo "fuzzing $target in ./$(dirname "$file") for ${FUZZTIME:-10000x}..."
		if ! go test -run='^$' -fuzz="^$target\$" -fuzztime="${FUZZTIME:-10000x}" "./$(dirname "$file")" >>"$log" 2>&1; then
			finish fuzz FAIL "$start" "$target"
			fail fuzz "$log (a failing input is saved under the package's testdata/fuzz/$target)"
		fi
		count=$((count + 1))
	done < <(grep -rEo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]+' cmd internal pkg | sed 's/:func /:/' | sort)
	finish fuzz ok "$start" "$count target(s)"
}

# The test stages run with the race detector, which needs cgo and so a C compiler (the demo and
# the builds need neither): say so now rather than at the first test stage, minutes in.
cc=$(go env CC)
if [ "$(go env CGO_ENABLED)" != 1 ] || ! command -v "${cc%% *}" >/dev/null 2>&1; then
	echo "make test runs the tests with the race detector, which needs cgo and a C compiler: go's C compiler '${cc}' was not found or CGO_ENABLED is 0. Install gcc (Debian and Ubuntu: apt-get install gcc) or point CC at a C compiler, and run make test again. (make demo needs none.)"
	exit 1
fi

# TEST_STAGES runs only the named stages, in this order (say, "unit integration e2e" under
# hack/under-load.sh); by default all of them, as CI does.
stages=" ${TEST_STAGES:-modules servers lint unit fuzz integration e2e} "
want() { [[ $stages == *" $1 "* ]]; }

want modules && quiet modules make --no-print-directory verify
# The first run builds the servers (minutes) and says so as it goes. The test stages need them.
if want servers || want integration || want e2e; then
	shown servers make --no-print-directory prepare
fi
want lint && quiet lint make --no-print-directory lint

# Integration packages are those whose tests start the stack (internal/testenv); e2e is test/.
module=$(go list -m)
packages=$(go list -test -f '{{.ImportPath}}|{{join .Deps " "}}' ./...) || fail classify "(go list above)"
integration=$(echo "$packages" | awk -F'|' -v tenv="$module/internal/testenv" '
	index($1, " [") == 0 { next }  # the generated test mains ("pkg.test")
	{ split($1, name, " "); pkg = name[1]; sub(/_test$/, "", pkg) }
	pkg == tenv || index(" " $2 " ", " " tenv " ") { print pkg }' | sort -u | grep -v "^$module/test/")
unit=$(go list ./... | grep -v "^$module/test/" | grep -vxF -f <(echo "$integration"))
e2e=$(go list ./test/...)

want unit && tests unit $unit
want fuzz && fuzz
want integration && tests integration $integration
want e2e && tests e2e $e2e

echo
echo "make test passed in $((SECONDS - total_start))s:"
printf '  %s\n' "${summary[@]}"
