#!/usr/bin/env bash
# prebuild-e2e.sh — build the e2e tier's components (etcd and Kubernetes:
# scripts/build-k8s.sh; flanneld: scripts/build-flannel.sh) in the
# background while make test-all runs the tiers before it, so that the
# longest build of a cold run (Kubernetes, most of it compiling) overlaps the
# tiers that mostly wait on real components, instead of following them.
#
#   start  start the build at a lower priority (nice 10: the tests that run
#          meanwhile keep the processors they ask for), in its own process
#          group; its output goes to _output/prebuild-e2e.log
#   wait   wait for a build started here to end (progress each minute), and
#          fail with its log's tail if it failed; nothing to do when none was
#          started (make test-e2e run alone builds in the foreground)
#   stop   stop a build still running (its process group, by the PID kept
#          here): make test-all calls it when it ends, failed or not
#
# Environment: GO (default go), E2E_K8S (passed to build-k8s.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$root/_output
pidf=$dir/prebuild-e2e.pid
rcf=$dir/prebuild-e2e.rc
log=$dir/prebuild-e2e.log
mkdir -p "$dir"

alive() { [[ -f $pidf ]] && kill -0 "$(cat "$pidf")" 2>/dev/null; }

case ${1:-} in
start)
	if alive; then
		echo "prebuild-e2e: already running (PID $(cat "$pidf"))"
		exit 0
	fi
	rm -f "$rcf"
	GO=${GO:-go} E2E_K8S=${E2E_K8S:-} setsid nice -n 10 bash -c \
		'"$0"/build-k8s.sh && "$0"/build-flannel.sh; echo $? >"$1"' "$root/scripts" "$rcf" >"$log" 2>&1 </dev/null &
	echo $! >"$pidf"
	echo "prebuild-e2e: building etcd, Kubernetes and flanneld in the background (PID $!, log $log)"
	;;
wait)
	[[ -f $pidf ]] || exit 0
	start=$SECONDS
	while alive; do
		sleep 5
		if (((SECONDS - start) % 60 < 5)); then
			echo "prebuild-e2e: waited $((SECONDS - start))s; $(tail -n 1 "$log")"
		fi
	done
	rm -f "$pidf"
	rc=$(cat "$rcf" 2>/dev/null || echo 1)
	if [[ $rc != 0 ]]; then
		echo "prebuild-e2e: the background build failed (exit $rc); the end of $log:"
		tail -n 40 "$log"
		exit 1
	fi
	echo "prebuild-e2e: done ($(grep -c '^build-k8s: built\|^build-flannel: built' "$log" || true) builds; waited $((SECONDS - start))s)"
	;;
stop)
	if alive; then
		pid=$(cat "$pidf")
		echo "prebuild-e2e: stopping the background build (process group $pid)"
		kill -- "-$pid" 2>/dev/null || true
	fi
	rm -f "$pidf"
	;;
*)
	echo "usage: $0 start|wait|stop" >&2
	exit 2
	;;
esac
