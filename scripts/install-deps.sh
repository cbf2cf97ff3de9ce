#!/usr/bin/env bash
# install-deps.sh — install what the real-path (integration and e2e) tests run:
#   * Debian packages: runc, iptables, iproute2 (system-wide, apt-get);
#   * pinned Go tools, built from the Go module proxy into project-local dirs:
#       $OUT/containerd/bin/{containerd,containerd-shim-runc-v2,ctr}   containerd v2.3.7
#       $OUT/tools/cnitool                     cni v1.3.0
#       $OUT/cni/bin/{bridge,loopback,portmap,bandwidth,host-local}   plugins v1.9.1
#       $OUT/cni/bin/flannel                   plugins v0.9.1 (before flannel moved out)
#       $OUT/crio/bin/{crio,copyimg,pinns}     CRI-O v1.36.3 (test/integration/criobuild),
#                                              with conmon, libseccomp and a C compiler from Debian
#
# STICKYIP_CONTAINERD=debian (the legacy run) installs Debian's containerd 1.6
# as well, which the test harness then uses instead of the pinned 2.x (see
# test/integration/README.md).
#
# `install-deps.sh demo` installs only what `make demo` runs: cnitool and the
# bridge plugin (no Debian package, no runtime).
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
CRIO_BIN="$OUT/crio/bin"
CRIO_MOD="$ROOT/test/integration/criobuild"
# CRI-O's own build tags (its Makefile) for a machine without btrfs,
# devicemapper, ostree and gpgme headers.
CRIO_TAGS="containers_image_ostree_stub containers_image_openpgp btrfs_noversion exclude_graphdriver_btrfs exclude_graphdriver_devicemapper seccomp"

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
	# CRI-O: its monitor, and what its cgo build and pinns need.
	command -v conmon >/dev/null || missing+=(conmon)
	command -v cc >/dev/null || missing+=(gcc libc6-dev)
	command -v make >/dev/null || missing+=(make)
	command -v pkg-config >/dev/null || missing+=(pkg-config)
	pkg-config --exists libseccomp 2>/dev/null || missing+=(libseccomp-dev)
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

# install_crio: crio and copyimg from the pinned module in $CRIO_MOD (its
# go.sum pins every dependency; some are not in the checksum database, hence
# GOSUMDB=off), pinns compiled from the C source in the same CRI-O module.
# Rebuilt only when the stamp (go.mod, go.sum, tags, Go version) changes.
install_crio() {
	local stamp
	stamp=$( (cat "$CRIO_MOD/go.mod" "$CRIO_MOD/go.sum"; echo "$CRIO_TAGS"; "$GO" version) | sha256sum | cut -d' ' -f1)
	if [ -x "$CRIO_BIN/crio" ] && [ -x "$CRIO_BIN/copyimg" ] && [ -x "$CRIO_BIN/pinns" ] &&
		[ "$(cat "$CRIO_BIN/.stamp" 2>/dev/null)" = "$stamp" ]; then
		log "CRI-O binaries present in $CRIO_BIN"
		return
	fi
	log "building CRI-O (crio, copyimg, pinns) from $CRIO_MOD"
	local start=$SECONDS src tmp
	rm -f "$CRIO_BIN/.stamp"
	mkdir -p "$CRIO_BIN"
	(
		cd "$CRIO_MOD"
		export GOSUMDB=off GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=1
		"$GO" build -trimpath -tags "$CRIO_TAGS" -o "$CRIO_BIN/crio" github.com/cri-o/cri-o/cmd/crio
		"$GO" build -trimpath -tags "$CRIO_TAGS" -o "$CRIO_BIN/copyimg" github.com/cri-o/cri-o/test/copyimg
	)
	src=$(cd "$CRIO_MOD" && GOSUMDB=off GOFLAGS=-mod=readonly "$GO" list -m -f '{{.Dir}}' github.com/cri-o/cri-o)
	tmp=$(mktemp -d)
	cp -r "$src/pinns" "$tmp/pinns"
	chmod -R u+w "$tmp"
	make -s -C "$tmp/pinns" >/dev/null
	install -m 0755 "$tmp/bin/pinns" "$CRIO_BIN/pinns"
	rm -rf "$tmp"
	echo "$stamp" >"$CRIO_BIN/.stamp"
	log "built CRI-O in $((SECONDS - start))s"
}

go_install "$TOOLS" github.com/containernetworking/cni "$CNI_VERSION" \
	github.com/containernetworking/cni/cnitool

if [ "${1:-}" = demo ]; then
	go_install "$CNI_BIN" github.com/containernetworking/plugins "$PLUGINS_VERSION" \
		github.com/containernetworking/plugins/plugins/main/bridge
	exit 0
fi

install_apt

# containerd, its runc shim and ctr, static (no cgo: btrfs needs its headers,
# so the btrfs snapshotter is left out). runc comes from Debian.
TAGS=no_btrfs go_install "$CONTAINERD_BIN" github.com/containerd/containerd/v2 "$CONTAINERD_VERSION" \
	github.com/containerd/containerd/v2/cmd/containerd \
	github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
	github.com/containerd/containerd/v2/cmd/ctr

go_install "$CNI_BIN" github.com/containernetworking/plugins "$PLUGINS_VERSION" \
	github.com/containernetworking/plugins/plugins/main/bridge \
	github.com/containernetworking/plugins/plugins/main/loopback \
	github.com/containernetworking/plugins/plugins/meta/portmap \
	github.com/containernetworking/plugins/plugins/meta/bandwidth \
	github.com/containernetworking/plugins/plugins/ipam/host-local

go_install "$CNI_BIN" github.com/containernetworking/plugins "$FLANNEL_VERSION" \
	github.com/containernetworking/plugins/plugins/meta/flannel

install_crio

log "done: containerd in $CONTAINERD_BIN, CRI-O in $CRIO_BIN, CNI plugins in $CNI_BIN, cnitool in $TOOLS"
