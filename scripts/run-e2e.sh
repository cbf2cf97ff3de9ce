#!/usr/bin/env bash
# run-e2e.sh — run the end-to-end tests (test/e2e, build tag e2e), compiled
# once, in parallel groups.
#
# The tests spend most of their time waiting on real components (a full run
# used 9 min of CPU in 25 min on 2 cores), so two groups run side by side,
# each a sequence in one process:
#   node     the one-node scenarios (their kubelet uses the machine's fixed
#            device-plugin directory, so only one runs at a time)
#   cluster  the two-node cluster scenarios (TestCluster*: every node in its
#            own network and mount namespace)
# Each group's output goes to _output/e2e-logs/<group>.log and is printed when
# the group ends; the run fails when a group fails.
#
# With E2E_RUN set to anything but "." the tests it names run in one process
# instead (make test-e2e E2E_RUN=TestPlacement).
#
# BACKGROUND, when set, is a command run meanwhile at the lowest CPU priority
# (nice 19), so that it uses only the CPU the tests leave idle: make test-e2e
# builds the binaries of the next Kubernetes minor this way. Its output goes
# to _output/e2e-logs/background.log; it is waited for at the end (its
# failure fails the run) and killed, with its process group, if the run
# ends early.
#
# Environment: GO (default go), E2E_RUN, E2E_TIMEOUT (default 30m, per group),
# E2E_K8S (passed to the tests), BACKGROUND.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
GO=${GO:-go}
RUN=${E2E_RUN:-.}
TIMEOUT=${E2E_TIMEOUT:-30m}
logs=$root/_output/e2e-logs
bin=$root/_output/e2e.test
mkdir -p "$logs"

bg=""
cleanup() {
	if [[ -n $bg ]] && kill -0 "$bg" 2>/dev/null; then
		kill -TERM -- "-$bg" 2>/dev/null || true
	fi
}
trap cleanup EXIT

if [[ -n ${BACKGROUND:-} ]]; then
	echo "run-e2e: in the background (nice 19): $BACKGROUND"
	setsid nice -n 19 bash -c "$BACKGROUND" >"$logs/background.log" 2>&1 &
	bg=$!
fi

echo "run-e2e: compiling the tests"
(cd "$root" && "$GO" test -tags e2e -c -o "$bin" ./test/e2e/)

export E2E_STRICT=1 E2E_K8S=${E2E_K8S:-}
flags=(-test.v -test.count=1 -test.timeout "$TIMEOUT")
start=$SECONDS
status=0
if [[ $RUN != . ]]; then
	(cd "$root/test/e2e" && "$bin" "${flags[@]}" -test.run "$RUN") || status=$?
else
	declare -A pids
	(cd "$root/test/e2e" && exec "$bin" "${flags[@]}" -test.skip '^TestCluster') >"$logs/node.log" 2>&1 &
	pids[node]=$!
	(cd "$root/test/e2e" && exec "$bin" "${flags[@]}" -test.run '^TestCluster') >"$logs/cluster.log" 2>&1 &
	pids[cluster]=$!
	for group in node cluster; do
		st=0
		wait "${pids[$group]}" || st=$?
		echo "==> e2e group $group: exit $st after $((SECONDS - start))s ($logs/$group.log)"
		cat "$logs/$group.log"
		[[ $st -eq 0 ]] || status=$st
	done
fi
echo "run-e2e: tests done in $((SECONDS - start))s, exit $status"

if [[ -n $bg ]]; then
	st=0
	wait "$bg" || st=$?
	bg=""
	echo "run-e2e: background command: exit $st ($logs/background.log)"
	tail -5 "$logs/background.log"
	[[ $status -ne 0 ]] || status=$st
fi
exit "$status"
