#!/bin/sh
# Runs every Go fuzz target in the repository for a bounded time.
#
# Targets are found by scanning *_test.go files for `func FuzzXxx(`, so new
# targets are picked up without editing this script. Each runs with
# `go test -run '^$' -fuzz '^FuzzXxx$' -fuzztime T` in its package. A crasher is
# written by `go test` to <pkg>/testdata/fuzz/FuzzXxx/<hash>; commit it, it then
# runs as a regression case in every plain `go test`.
#
# Environment: GO (default go), FUZZTIME (per target, default 25s),
# FUZZ_BUDGET (seconds for all targets together, default 240; the per-target
# time shrinks to fit), FUZZ_TAGS (build tags, default none), STICKYIP_STRICT
# (set: finding no target fails).
set -eu
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-25s}
FUZZ_BUDGET=${FUZZ_BUDGET:-240}
FUZZ_TAGS=${FUZZ_TAGS:-}

cd "$(dirname "$0")/../.."

# "<package dir> <target>" per line, sorted, skipping tool caches.
targets=$(grep -rlE --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*\(' . \
	--exclude-dir=.cache --exclude-dir=_output --exclude-dir=.git --exclude-dir=vendor 2>/dev/null |
	while read -r f; do
		dir=$(dirname "$f")
		sed -nE 's/^func (Fuzz[A-Za-z0-9_]*)\(.*/\1/p' "$f" | while read -r name; do
			echo "$dir $name"
		done
	done | sort -u)

n=$(printf '%s\n' "$targets" | grep -c . || true)
if [ "$n" -eq 0 ]; then
	echo "fuzz: no Fuzz targets found"
	# Strict mode (make's tiers): a fuzzing step that fuzzed nothing fails.
	[ -z "${STICKYIP_STRICT:-}" ] || exit 1
	exit 0
fi

# Per-target time: FUZZTIME, shrunk so that all targets fit in FUZZ_BUDGET.
secs=$(printf '%s' "$FUZZTIME" | sed -nE 's/^([0-9]+)s$/\1/p')
if [ -n "$secs" ] && [ $((secs * n)) -gt "$FUZZ_BUDGET" ]; then
	secs=$((FUZZ_BUDGET / n))
	[ "$secs" -lt 5 ] && secs=5
	FUZZTIME=${secs}s
fi
echo "fuzz: $n targets, $FUZZTIME each"

# crashers DIR NAME: how many inputs the target's corpus of crashers holds.
crashers() { find "$1/testdata/fuzz/$2" -type f 2>/dev/null | wc -l; }

# fuzz DIR NAME LOG: one bounded run of the target; its output goes to LOG,
# then to stdout.
fuzz() {
	st=0
	# From the package's directory: a nested module (deploy/policycheck)
	# is built from its own go.mod.
	(cd "$1" && $GO test ${FUZZ_TAGS:+-tags "$FUZZ_TAGS"} -run '^$' -fuzz "^${2}\$" -fuzztime "$FUZZTIME" .) >"$3" 2>&1 || st=$?
	cat "$3"
	return "$st"
}

log=$(mktemp)
trap 'rm -f "$log"' EXIT
failed=""
ran=0
printf '%s\n' "$targets" | {
	while read -r dir name; do
		echo "fuzz: $name in $dir"
		before=$(crashers "$dir" "$name")
		ok=1
		fuzz "$dir" "$name" "$log" || ok=0
		# go test -fuzz can end a run that found nothing with "context
		# deadline exceeded" when a worker answers late at the deadline on a
		# loaded machine (no input is written): run such a target once more.
		# A real crash or hang always leaves its input under testdata/fuzz.
		if [ "$ok" = 0 ] && [ "$(crashers "$dir" "$name")" = "$before" ] && grep -q 'context deadline exceeded' "$log"; then
			echo "fuzz: $name ended with 'context deadline exceeded' and no failing input; running it once more"
			ok=1
			fuzz "$dir" "$name" "$log" || ok=0
		fi
		if [ "$ok" = 0 ]; then
			failed="$failed $dir:$name"
			echo "fuzz: $name FAILED; the crasher is under $dir/testdata/fuzz/$name/ (commit it as a regression case)"
		fi
		ran=$((ran + 1))
	done
	echo "fuzz: ran $ran targets; failed:${failed:- none}"
	[ -z "$failed" ]
}
