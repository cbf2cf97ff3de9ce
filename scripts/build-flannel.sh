#!/usr/bin/env bash
# build-flannel.sh — build flanneld and install-conf (the two programs of
# flannel's own image that kube-flannel.yml runs) from the Go module proxy,
# at the version pinned by test/e2e/k8sbuild/flannel (its go.sum pins every
# dependency; stub-vpc/ stands in for the one module the proxy refuses).
#
#   _output/flannel/bin/flanneld       cgo (the udp backend needs it), dynamically linked
#   _output/flannel/bin/install-conf   static; kube-flannel's install-cni container
#
# The flannel CNI plugin is not built here: scripts/install-deps.sh builds
# containernetworking/plugins/plugins/meta/flannel@v0.9.1 into _output/cni/bin.
#
# A binary is rebuilt only when the stamp next to it (the sha256 of the
# module's go.mod, go.sum and stub, the Go version and, for cgo, the C
# compiler's version) changes, so reruns take a second.
#
# Environment: GO (default go), OUT (default _output/flannel/bin), FORCE=1
# to rebuild regardless of stamps.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
GO=${GO:-go}
OUT=${OUT:-$root/_output/flannel/bin}
mod=$root/test/e2e/k8sbuild/flannel
mkdir -p "$OUT"
export GOFLAGS="-mod=readonly -buildvcs=false"

version=$(awk '($1 == "require" && $2 == "github.com/flannel-io/flannel") || $1 == "github.com/flannel-io/flannel" {print ($1 == "require" ? $3 : $2); exit}' "$mod/go.mod")
if [[ -z $version ]]; then
	echo "build-flannel: no 'require github.com/flannel-io/flannel' line in $mod/go.mod" >&2
	exit 1
fi

stamp_of() { # cgo (0/1) -> stamp text
	(
		cat "$mod/go.mod" "$mod/go.sum" "$mod"/stub-vpc/go.mod "$mod"/stub-vpc/v20170312/*.go
		"$GO" version
		if [[ $1 == 1 ]]; then cc --version | head -1; fi
	) | sha256sum | cut -d' ' -f1
}

# build NAME PACKAGE CGO LDFLAGS
build() {
	local name=$1 pkg=$2 cgo=$3 ldflags=$4 stamp
	stamp=$(stamp_of "$cgo")
	if [[ -z ${FORCE:-} && -x $OUT/$name && -f $OUT/$name.stamp && $(cat "$OUT/$name.stamp") == "$stamp" ]]; then
		echo "build-flannel: $name up to date"
		return
	fi
	echo "build-flannel: building $name ($pkg@$version)"
	local start=$SECONDS
	rm -f "$OUT/$name.stamp"
	(cd "$mod" && CGO_ENABLED=$cgo "$GO" build -trimpath -ldflags "-s -w $ldflags" -o "$OUT/$name" "$pkg")
	echo "$stamp" >"$OUT/$name.stamp"
	echo "build-flannel: built $name in $((SECONDS - start))s"
}

build flanneld github.com/flannel-io/flannel 1 "-X github.com/flannel-io/flannel/pkg/version.Version=$version"
build install-conf github.com/flannel-io/flannel/cmd/install_conf 0 ""
