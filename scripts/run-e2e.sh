#!/usr/bin/env bash
# run-e2e.sh — run the end-to-end tests (test/e2e, build tag e2e), compiled
# once, in parallel groups.
#
# The tests spend most of their time waiting on real components (a full run
# used 9 min of CPU in 25 min on 2 cores), so four groups run side by side,
# each a sequence in one process. Every simulated node has its own network
# and mount namespace (the kubelet's fixed device-plugin directory is the
# node's own), so any two tests can run at once. The groups (minutes on an
# idle machine; under the four groups' load on 2 cores, about twice that):
#   cluster   TestCluster: the two-node scenarios on one cluster boot, the
#             etcd disruption table among them (10)
#   install   TestClusterInstall, the install journey on its own cluster, then
#             the etcd table's control on host-local (8)
#   node-a    the checkpoint and restore scenarios, then
#             TestClusterPodCIDRChange on its own cluster (8)
#   node-b    every other test, the smoke tests among them (so a new test
#             runs somewhere) (7)
# Each group's output goes to _output/e2e-logs/<group>.log and is printed when
# the group ends; the run fails when a group fails.
#
# With E2E_RUN set to anything but "." the tests it names run in one process
# instead (make test-e2e E2E_RUN=TestPlacement).
#
# Strict mode (STICKYIP_STRICT, harness.StrictEnv) is on: a component that is
# missing fails its test instead of skipping it, and a run (or a group) that
# ran no test fails.
#
# Environment: GO (default go), E2E_RUN, E2E_TIMEOUT (default 30m, per group),
# E2E_K8S (passed to the tests).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
GO=${GO:-go}
RUN=${E2E_RUN:-.}
TIMEOUT=${E2E_TIMEOUT:-30m}
logs=$root/_output/e2e-logs
bin=$root/_output/e2e.test
mkdir -p "$logs"

echo "run-e2e: compiling the tests"
(cd "$root" && "$GO" test -tags e2e -c -o "$bin" ./test/e2e/)

# tails FILE: for each test that failed in FILE (a go test -v output), the
# last lines of its components' logs (_output/e2e-logs/<test>/), printed
# before the output itself so that the failure stays next to "--- FAIL".
tails() {
	local test f
	for test in $(sed -n 's/^--- FAIL: \([A-Za-z0-9_]*\).*/\1/p' "$1" | sort -u); do
		[[ -d $logs/$test ]] || continue
		while IFS= read -r f; do
			echo "---- $test: last lines of $f"
			tail -n 40 "$f"
		done < <(find "$logs/$test" -type f -name '*.log' ! -name audit.log ! -path '*/pods/default_*' | sort)
	done
}

# ranNone FILE: a go test -v output in which no test ran (-run matched
# nothing): said, and counted as a failure.
ranNone() {
	if ! grep -q '^=== RUN' "$1"; then
		echo "run-e2e: no test ran in $1"
		return 0
	fi
	return 1
}

export STICKYIP_STRICT=1 E2E_K8S=${E2E_K8S:-}
flags=(-test.v -test.count=1 -test.timeout "$TIMEOUT")
start=$SECONDS
status=0
if [[ $RUN != . ]]; then
	(cd "$root/test/e2e" && "$bin" "${flags[@]}" -test.run "$RUN") 2>&1 | tee "$logs/run.log" || status=$?
	[[ $status -eq 0 ]] || tails "$logs/run.log"
	! ranNone "$logs/run.log" || status=1
else
	cluster='^TestCluster$'
	install='^TestClusterInstall$'
	node_a='^(TestCheckpointd|TestCheckpointdOutage|TestClusterPodCIDRChange)$'
	declare -A pids
	group() { # NAME go-test-flags...
		local name=$1
		shift
		(cd "$root/test/e2e" && exec "$bin" "${flags[@]}" "$@") >"$logs/$name.log" 2>&1 &
		pids[$name]=$!
	}
	group cluster -test.run "$cluster"
	group install -test.run "$install"
	group node-a -test.run "$node_a"
	group node-b -test.skip "$cluster|$install|$node_a"
	for name in cluster install node-a node-b; do
		st=0
		wait "${pids[$name]}" || st=$?
		echo "==> e2e group $name: exit $st after $((SECONDS - start))s ($logs/$name.log)"
		[[ $st -eq 0 ]] || tails "$logs/$name.log"
		cat "$logs/$name.log"
		[[ $st -eq 0 ]] || status=$st
		! ranNone "$logs/$name.log" || status=1
	done
fi
echo "run-e2e: tests done in $((SECONDS - start))s, exit $status"

exit "$status"
