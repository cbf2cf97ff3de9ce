#!/usr/bin/env bash
# install-deps.sh — install what the real-path (integration) tests run:
#   * Debian packages: containerd, runc, iptables, iproute2 (system-wide, apt-get);
#   * pinned Go tools, built from the Go module proxy into project-local dirs:
#       $OUT/tools/cnitool                     cni v1.3.0
#       $OUT/cni/bin/{bridge,loopback,portmap,host-local}   plugins v1.9.1
#       $OUT/cni/bin/flannel                   plugins v0.9.1 (before flannel moved out)
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

CNI_BIN="$OUT/cni/bin"
TOOLS="$OUT/tools"

log() { printf 'install-deps: %s\n' "$*" >&2; }

install_apt() {
	local missing=()
	command -v containerd >/dev/null || missing+=(containerd)
	command -v ctr >/dev/null || missing+=(containerd)
	command -v runc >/dev/null || missing+=(runc)
	command -v iptables >/dev/null || missing+=(iptables)
	command -v ip >/dev/null || missing+=(iproute2)
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
	apt-get install -y -qq --no-install-recommends containerd runc iptables iproute2 >/dev/null
}

# built_from BIN MODULE VERSION: true when BIN exists and was built from MODULE@VERSION.
built_from() {
	[ -x "$1" ] || return 1
	"$GO" version -m "$1" 2>/dev/null | awk -v m="$2" -v v="$3" '
		($1 == "mod" || $1 == "dep") && $2 == m && $3 == v { found = 1 }
		END { exit !found }'
}

# go_install DIR MODULE VERSION PKG... : go install each PKG@VERSION into DIR unless present.
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
	CGO_ENABLED=0 GOBIN="$dir" GOFLAGS= "$GO" install -trimpath "${todo[@]}"
}

install_apt

go_install "$TOOLS" github.com/containernetworking/cni "$CNI_VERSION" \
	github.com/containernetworking/cni/cnitool

go_install "$CNI_BIN" github.com/containernetworking/plugins "$PLUGINS_VERSION" \
	github.com/containernetworking/plugins/plugins/main/bridge \
	github.com/containernetworking/plugins/plugins/main/loopback \
	github.com/containernetworking/plugins/plugins/meta/portmap \
	github.com/containernetworking/plugins/plugins/ipam/host-local

go_install "$CNI_BIN" github.com/containernetworking/plugins "$FLANNEL_VERSION" \
	github.com/containernetworking/plugins/plugins/meta/flannel

log "done: CNI plugins in $CNI_BIN, cnitool in $TOOLS"
