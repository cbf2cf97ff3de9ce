#!/usr/bin/env bash
# demo.sh — watch a pod keep its IP, on this machine, in about a second
# (`make demo`; root, no cluster).
#
# A throwaway node (a network namespace holding the bridge), a network
# namespace per pod sandbox, the real bridge plugin with stickyip as its IPAM
# on a private range, driven by cnitool as a container runtime calls CNI: the
# pod's namespace, name and UID in CNI_ARGS, its annotations in CAP_ARGS as the
# capability io.kubernetes.cri.pod-annotations. The story:
#   1. demo/db-0, annotated io.kubernetes.cri/reserved-ip-duration: "10", and
#      demo/web-0, not annotated, start;
#   2. both are deleted: `stickyip list` shows db-0's address reserved;
#   3. another pod asks for that address and is refused; not asking, it gets
#      another one;
#   4. both come back (new sandboxes, new UIDs, same names): db-0 gets its
#      address again, web-0 does not.
# Every claim is checked: exit 0 when the story held, 1 when it did not.
#
# Nothing but what it makes is touched: no traffic leaves its namespaces; its
# network config, stickyip's store and libcni's result cache live in one
# temporary directory. The namespaces it made and that directory are removed
# at exit, also on failure and on Ctrl-C. The host's /etc/cni/net.d and
# /var/lib/cni are never written.
#
# Needs ip (iproute2) and unshare (util-linux). STICKYIP is the plugin
# (default bin/stickyip: make build); cnitool and the bridge plugin come from
# OUT (default _output: scripts/install-deps.sh demo builds them).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-$ROOT/_output}"
STICKYIP="${STICKYIP:-$ROOT/bin/stickyip}"
CNITOOL="$OUT/tools/cnitool"
BRIDGE="$OUT/cni/bin/bridge"

NET=stickyip-demo
RANGE=10.99.0.0/24
DURATION=10                 # minutes: io.kubernetes.cri/reserved-ip-duration
STICKY="{\"io.kubernetes.cri/reserved-ip-duration\":\"$DURATION\"}"
PLAIN='{}'

TAG="stickyip-demo-$$"      # every namespace this run makes is named $TAG-…
NODE="$TAG-node"
WORK=""                     # the run's temporary directory
MADE=()                     # the namespaces it made
NETNS_DIR_MADE=""           # whether its first namespace made /run/netns
declare -A SANDBOX=()       # pod → its current sandbox (network namespace)
declare -A UID_OF=()        # sandbox → the pod UID it was made for

say() { printf '%s\n' "$*"; }

fail() {
	printf '\ndemo: FAILED: %s\n' "$*" >&2
	if [ -n "$WORK" ] && [ -s "$WORK/stickyip.log" ]; then
		sed 's/^/  stickyip log: /' "$WORK/stickyip.log" >&2
	fi
	exit 1
}

# cleanup removes what the run made, by the names it gave: its namespaces
# (the bridge and the veths live in them), its directory and, when its first
# namespace made it and it is empty again, /run/netns.
cleanup() {
	local st=$? i left=()
	trap - EXIT INT TERM
	for ((i = ${#MADE[@]} - 1; i >= 0; i--)); do
		[ ! -e "/run/netns/${MADE[i]}" ] || ip netns del "${MADE[i]}" || left+=("${MADE[i]}")
	done
	if [ -n "$NETNS_DIR_MADE" ] && [ -z "$(ls -A /run/netns 2>/dev/null)" ]; then
		umount /run/netns 2>/dev/null && rmdir /run/netns
	fi
	[ -z "$WORK" ] || rm -rf "$WORK" || left+=("$WORK")
	if [ ${#left[@]} -gt 0 ]; then
		printf '\ndemo: could not remove %s\n' "${left[*]}" >&2
		st=1
	elif [ ${#MADE[@]} -gt 0 ] || [ -n "$WORK" ]; then
		say ""
		say "Cleaned up: the network namespaces $TAG-* (with the bridge and veths in them) and $WORK."
	fi
	exit "$st"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

[ "$(id -u)" -eq 0 ] || fail "needs root (network namespaces)"
command -v ip >/dev/null || fail "ip missing: apt-get install iproute2"
command -v unshare >/dev/null || fail "unshare missing: apt-get install util-linux"
[ -x "$STICKYIP" ] || fail "$STICKYIP missing: make build"
for b in "$CNITOOL" "$BRIDGE"; do
	[ -x "$b" ] || fail "$b missing: scripts/install-deps.sh demo"
done

# newns NAME: make the network namespace NAME, removed at exit.
newns() {
	[ -d /run/netns ] || NETNS_DIR_MADE=1
	MADE+=("$1")
	ip netns add "$1"
}

# in_node CMD...: CMD in the node's network namespace, as a runtime on the
# node runs the CNI chain. libcni keeps its result cache in /var/lib/cni and
# cnitool cannot move it: for CMD alone, /var/lib is an empty tmpfs with the
# run's own cache directory on /var/lib/cni.
in_node() {
	ip netns exec "$NODE" unshare --mount --propagation private sh -ec '
		cache=$1; shift
		mount -t tmpfs stickyip-demo /var/lib
		mkdir /var/lib/cni
		mount --bind "$cache" /var/lib/cni
		exec "$@"' sh "$WORK/cni-cache" "$@"
}

# cni VERB POD ANNOTATIONS: cnitool VERB for POD's current sandbox, as a
# runtime calls it: the pod's identity in CNI_ARGS, its annotations (a JSON
# object) in CAP_ARGS.
cni() {
	local ns=${SANDBOX[$2]}
	CNI_PATH="$WORK/bin" NETCONFPATH="$WORK/net.d" \
		CNI_ARGS="IgnoreUnknown=1;K8S_POD_NAMESPACE=demo;K8S_POD_NAME=$2;K8S_POD_UID=${UID_OF[$ns]}" \
		CAP_ARGS="{\"io.kubernetes.cri.pod-annotations\":$3}" \
		in_node "$CNITOOL" "$1" "$NET" "/var/run/netns/$ns"
}

# sandbox POD: a new sandbox for POD, as the kubelet makes for every pod it
# creates: a fresh network namespace (cnitool derives the container ID from
# its path) and a fresh UID.
sandbox() {
	local ns="$TAG-$1-${#MADE[@]}"
	newns "$ns"
	SANDBOX[$1]=$ns
	UID_OF[$ns]=$(cat /proc/sys/kernel/random/uuid)
}

# start POD ANNOTATIONS: a new sandbox for POD and its CNI ADD.
start() {
	local out
	sandbox "$1"
	out=$(cni add "$1" "$2" 2>&1) || fail "ADD of demo/$1: $out"
}

# stop POD ANNOTATIONS: the CNI DEL of POD's sandbox, then the sandbox goes.
stop() {
	local out
	out=$(cni del "$1" "$2" 2>&1) || fail "DEL of demo/$1: $out"
	ip netns del "${SANDBOX[$1]}"
}

# eth0 POD: the IPv4 address of eth0 in POD's sandbox, as the pod sees it.
eth0() {
	ip -n "${SANDBOX[$1]}" -o -4 addr show dev eth0 | awk '{ sub("/.*", "", $4); print $4; exit }'
}

# listed IP STATE [POD]: whether `stickyip list` ($LIST) shows IP in STATE
# (for POD).
listed() {
	awk -v ip="$1" -v st="$2" -v pod="${3:-}" '
		$2 == ip && $3 == st && (pod == "" || $4 == pod) { found = 1 }
		END { exit !found }' <<<"$LIST"
}

# The node: its network namespace, and one directory for everything else.
WORK=$(mktemp -d /tmp/stickyip-demo.XXXXXX)
mkdir "$WORK/bin" "$WORK/net.d" "$WORK/data" "$WORK/cni-cache"
ln -s "$(readlink -f "$STICKYIP")" "$WORK/bin/stickyip"
ln -s "$(readlink -f "$BRIDGE")" "$WORK/bin/bridge"
cat >"$WORK/net.d/$NET.conflist" <<EOF
{
  "cniVersion": "1.1.0",
  "name": "$NET",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "demo0",
      "isGateway": true,
      "ipMasq": false,
      "capabilities": { "io.kubernetes.cri.pod-annotations": true },
      "ipam": {
        "type": "stickyip",
        "dataDir": "$WORK/data",
        "logFile": "$WORK/stickyip.log",
        "hostLocalDataDir": "",
        "ranges": [[{ "subnet": "$RANGE" }]]
      }
    }
  ]
}
EOF
newns "$NODE"

say "stickyip demo: a node (network namespace $NODE) with the bridge plugin and"
say "stickyip on $RANGE, network config $WORK/net.d/$NET.conflist."
say ""

say "1. Two pods start. A runtime's ADD, as cnitool makes it here:"
sandbox db-0
say "     CNI_ARGS='IgnoreUnknown=1;K8S_POD_NAMESPACE=demo;K8S_POD_NAME=db-0;K8S_POD_UID=${UID_OF[${SANDBOX[db-0]}]}'"
say "     CAP_ARGS='{\"io.kubernetes.cri.pod-annotations\":$STICKY}'"
say "     cnitool add $NET /var/run/netns/${SANDBOX[db-0]}"
out=$(cni add db-0 "$STICKY" 2>&1) || fail "ADD of demo/db-0: $out"
db0=$(eth0 db-0)
start web-0 "$PLAIN"
web0=$(eth0 web-0)
say "   demo/db-0   reserved-ip-duration \"$DURATION\"   eth0 $db0"
say "   demo/web-0  no annotation               eth0 $web0"
say ""

say "2. Both pods are deleted (CNI DEL, sandboxes removed). stickyip list:"
stop db-0 "$STICKY"
stop web-0 "$PLAIN"
LIST=$("$STICKYIP" list --cni-conf-dir "$WORK/net.d" 2>&1) || fail "stickyip list: $LIST"
say "$LIST" | sed 's/^/   /'
listed "$db0" reserved demo/db-0 || fail "$db0 is not listed as reserved for demo/db-0"
! listed "$web0" reserved || fail "$web0 (web-0, not annotated) is listed as reserved"
say "   db-0's $db0 is reserved for it for $DURATION minutes; web-0's $web0 only cools, then anyone may get it."
say ""

say "3. Another pod, demo/cache-0, asks for $db0 (annotation stickyip.io/ips: \"$db0\")."
sandbox cache-0
if out=$(cni add cache-0 "{\"stickyip.io/ips\":\"$db0\"}" 2>&1); then
	fail "demo/cache-0 got $db0, db-0's reserved address"
fi
say "   refused: ${out//$'\n'/ }"
ip netns del "${SANDBOX[cache-0]}"
start cache-0 "$PLAIN"
cache0=$(eth0 cache-0)
say "   Not asking, it gets eth0 $cache0."
[ "$cache0" != "$db0" ] || fail "demo/cache-0 got db-0's reserved $db0 without asking"
say ""

say "4. The pods are created again: new sandboxes, new UIDs, the same names."
start db-0 "$STICKY"
db0again=$(eth0 db-0)
start web-0 "$PLAIN"
web0again=$(eth0 web-0)
say "   demo/db-0   eth0 $db0again   (was $db0)"
say "   demo/web-0  eth0 $web0again   (was $web0)"
[ "$db0again" = "$db0" ] || fail "demo/db-0 came back with $db0again, not its $db0"
[ "$web0again" != "$web0" ] || fail "demo/web-0 (no annotation) came back with $web0 again"
say "   db-0 kept its address; web-0, without the annotation, got another."
