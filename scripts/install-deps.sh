#!/usr/bin/env bash
# install-deps.sh — install what the real-path (integration and e2e) tests run:
#   * Debian packages: runc, iptables, iproute2 (system-wide, apt-get);
#   * pinned Go tools, built from the Go module proxy into project-local dirs:
#       $OUT/containerd/bin/{containerd,containerd-shim-runc-v2,ctr}   containerd v2.3.7
#       $OUT/tools/cnitool                     cni v1.3.0
#       $OUT/cni/bin/{bridge,loopback,portmap,host-local}   plugins v1.9.1
#       $OUT/cni/bin/flannel                   plugins v0.9.1 (before flannel moved out)
#
# STICKYIP_CONTAINERD=debian (the legacy run) installs Debian's containerd 1.6
# as well, which the test harness then uses instead of the pinned 2.x (see
# docs/realpath.md).
#
# Idempotent: a package already installed, or a binary already built from the
# pinned version, is left alone. OUT defaults to <repo>/_output.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-$ROOT/_output}"
GO="${GO:-go}"

CNI_VERSION=v1.3.0
PLUGINS_VERSION=v1.9.1
FLANNEL_VERSION=v0.9.1
# containerd 2.3 is the long-term release line Kubernetes 1.36 supports.
CONTAINERD_VERSION=v2.3.7

CNI_BIN="$OUT/cni/bin"
TOOLS="$OUT/tools"
CONTAINERD_BIN="$OUT/containerd/bin"

log() { printf 'install-deps: %s\n' "$*" >&2; }

install_apt() {
	local missing=()
	if [ "${STICKYIP_CONTAINERD:-}" = debian ]; then
		command -v containerd >/dev/null || missing+=(containerd)
		command -v ctr >/dev/null || missing+=(containerd)
	fi
	command -v runc >/dev/null || missing+=(runc)
	command -v iptables >/dev/null || missing+=(iptables)
	command -v ip >/dev/null || missing+=(iproute2)
	command -v nsenter >/dev/null || missing+=(util-linux)
	if [ "${#missing[@]}" -eq 0 ]; then
		log "Debian packages present"
		return
	fi
	if [ "$(id -u)" -ne 0 ]; then
		log "need root to apt-get install ${missing[*]}"
		exit 1
	fi
	log "apt-get install ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# built_from BIN MODULE VERSION: true when BIN exists and was built from MODULE@VERSION.
built_from() {
	[ -x "$1" ] || return 1
	"$GO" version -m "$1" 2>/dev/null | awk -v m="$2" -v v="$3" '
		($1 == "mod" || $1 == "dep") && $2 == m && $3 == v { found = 1 }
		END { exit !found }'
}

# go_install DIR MODULE VERSION PKG... : go install each PKG@VERSION into DIR unless present.
# $TAGS, when set, are the build tags.
go_install() {
	local dir="$1" mod="$2" ver="$3"
	shift 3
	local todo=()
	for pkg in "$@"; do
		built_from "$dir/$(basename "$pkg")" "$mod" "$ver" || todo+=("$pkg@$ver")
	done
	if [ "${#todo[@]}" -eq 0 ]; then
		log "$mod@$ver binaries present in $dir"
		return
	fi
	mkdir -p "$dir"
	log "go install ${todo[*]}"
	local start=$SECONDS
	CGO_ENABLED=0 GOBIN="$dir" GOFLAGS= "$GO" install -trimpath ${TAGS:+-tags "$TAGS"} "${todo[@]}"
	log "built in $((SECONDS - start))s"
}

install_apt

# containerd, its runc shim and ctr, static (no cgo: btrfs needs its headers,
# so the btrfs snapshotter is left out). runc comes from Debian.
TAGS=no_btrfs go_install "$CONTAINERD_BIN" github.com/containerd/containerd/v2 "$CONTAINERD_VERSION" \
	github.com/containerd/containerd/v2/cmd/containerd \
	github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
	github.com/containerd/containerd/v2/cmd/ctr

go_install "$TOOLS" github.com/containernetworking/cni "$CNI_VERSION" \
	github.com/containernetworking/cni/cnitool

go_install "$CNI_BIN" github.com/containernetworking/plugins "$PLUGINS_VERSION" \
	github.com/containernetworking/plugins/plugins/main/bridge \
	github.com/containernetworking/plugins/plugins/main/loopback \
	github.com/containernetworking/plugins/plugins/meta/portmap \
	github.com/containernetworking/plugins/plugins/ipam/host-local

go_install "$CNI_BIN" github.com/containernetworking/plugins "$FLANNEL_VERSION" \
	github.com/containernetworking/plugins/plugins/meta/flannel

log "done: containerd in $CONTAINERD_BIN, CNI plugins in $CNI_BIN, cnitool in $TOOLS"
