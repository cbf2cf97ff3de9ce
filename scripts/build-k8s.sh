#!/usr/bin/env bash
# build-k8s.sh — build etcd and the Kubernetes binaries for the e2e tests from
# the Go module proxy, at the versions pinned by the scratch modules under
# test/e2e/k8sbuild/ (their go.sum pins every dependency).
#
# Kubernetes release (E2E_K8S):
#   unset or 1.37  test/e2e/k8sbuild/kube (1.37.x): kube-apiserver,
#                  kube-controller-manager, kube-scheduler, kubectl, kubelet
#                  and kube-proxy (the two-node cluster's Services, for
#                  flanneld's in-cluster config) into _output/k8s/bin
#   1.36           test/e2e/k8sbuild/kube-1.36 (1.36.x): the older release the
#                  project still supports; kube-apiserver and kubelet (what the
#                  one-node scenarios run) and kube-controller-manager (the
#                  placement adversary's garbage collector) into
#                  _output/k8s/1.36/bin
# etcd is built into the same directory either way.
#
# The binaries of a module that need building are built by one go build,
# which compiles what they share once and links them in parallel. A binary
# is rebuilt only when the stamp next to it (the sha256 of its module's
# go.mod and go.sum plus the Go version) changes, so reruns take a
# second.
#
# Environment: GO (default go), E2E_K8S (above), OUT (default as above),
# FORCE=1 to rebuild regardless of stamps.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
GO=${GO:-go}
case ${E2E_K8S:-} in
'' | 1.37)
	kube=$root/test/e2e/k8sbuild/kube
	OUT=${OUT:-$root/_output/k8s/bin}
	kbins=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy)
	;;
1.36)
	kube=$root/test/e2e/k8sbuild/kube-1.36
	OUT=${OUT:-$root/_output/k8s/1.36/bin}
	kbins=(kube-apiserver kube-controller-manager kubelet)
	;;
*)
	echo "build-k8s: E2E_K8S=$E2E_K8S: want 1.37 (default) or 1.36" >&2
	exit 2
	;;
esac
mkdir -p "$OUT"

# Some k8s.io staging modules are not in the checksum database; the committed
# go.sum files pin them instead.
export GOSUMDB=off GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0

stamp_of() { # module dir -> stamp text
	(cat "$1/go.mod" "$1/go.sum"; "$GO" version) | sha256sum | cut -d' ' -f1
}

# fresh NAME MODULE_DIR: true when NAME was built from the module as it is.
fresh() {
	[[ -z ${FORCE:-} && -x $OUT/$1 && -f $OUT/$1.stamp && $(cat "$OUT/$1.stamp") == "$(stamp_of "$2")" ]]
}

# build MODULE_DIR LDFLAGS NAME...: every NAME (k8s.io/kubernetes/cmd/NAME,
# or . for etcd's module) that is not fresh, in one go build: the packages
# they share are compiled once and the binaries link in parallel.
build() {
	local dir=$1 ldflags=$2 todo=() pkgs=() name stamp
	shift 2
	for name in "$@"; do
		if fresh "$name" "$dir"; then
			echo "build-k8s: $name up to date"
		else
			todo+=("$name")
		fi
	done
	[[ ${#todo[@]} -gt 0 ]] || return 0
	for name in "${todo[@]}"; do
		rm -f "$OUT/$name.stamp"
		if [[ $name == etcd ]]; then pkgs+=(.); else pkgs+=("k8s.io/kubernetes/cmd/$name"); fi
	done
	echo "build-k8s: building ${todo[*]}"
	local start=$SECONDS
	if [[ ${#todo[@]} -eq 1 ]]; then
		(cd "$dir" && "$GO" build -trimpath -ldflags "-s -w $ldflags" -o "$OUT/${todo[0]}" "${pkgs[@]}")
	else
		(cd "$dir" && "$GO" build -trimpath -ldflags "-s -w $ldflags" -o "$OUT/" "${pkgs[@]}")
	fi
	stamp=$(stamp_of "$dir")
	for name in "${todo[@]}"; do
		echo "$stamp" >"$OUT/$name.stamp"
	done
	echo "build-k8s: built ${todo[*]} in $((SECONDS - start))s"
}

kube_version() { # module dir -> the k8s.io/kubernetes version it requires
	local v
	v=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' "$1/go.mod")
	echo "${v:-$(awk '$1 == "k8s.io/kubernetes" {print $2; exit}' "$1/go.mod")}"
}
kver=$(kube_version "$kube")
kmajor=${kver#v}; kmajor=${kmajor%%.*}
kminor=${kver#v*.}; kminor=${kminor%%.*}
vpkg=k8s.io/component-base/version
kldflags="-X $vpkg.gitVersion=$kver -X $vpkg.gitMajor=$kmajor -X $vpkg.gitMinor=$kminor -X $vpkg.gitTreeState=clean"

build "$root/test/e2e/k8sbuild/etcd" "" etcd
build "$kube" "$kldflags" "${kbins[@]}"
