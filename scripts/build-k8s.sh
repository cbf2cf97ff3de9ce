#!/usr/bin/env bash
# build-k8s.sh — build etcd and the Kubernetes binaries for the e2e tests from
# the Go module proxy, at the versions pinned by the scratch modules under
# test/e2e/k8sbuild/ (their go.sum pins every dependency).
#
# Kubernetes release (E2E_K8S):
#   unset or 1.37  test/e2e/k8sbuild/kube (1.37.x): kube-apiserver,
#                  kube-controller-manager, kube-scheduler, kubectl, kubelet
#                  into _output/k8s/bin; kube-proxy (the two-node cluster's
#                  Services, for flanneld's in-cluster config) from
#                  test/e2e/k8sbuild/kube-proxy, which must require the same
#                  k8s.io/kubernetes (a module of its own so that adding it
#                  changed none of the other binaries' stamps)
#   1.36           test/e2e/k8sbuild/kube-1.36 (1.36.x): the older release the
#                  project still supports; kube-apiserver and kubelet (what the
#                  one-node scenarios run) into _output/k8s/1.36/bin
# etcd is built into the same directory either way.
#
# A binary is rebuilt only when the stamp next to it (the sha256 of its
# module's go.mod and go.sum plus the Go version) changes, so reruns take a
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
	kbins=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet)
	proxy=$root/test/e2e/k8sbuild/kube-proxy
	;;
1.36)
	kube=$root/test/e2e/k8sbuild/kube-1.36
	OUT=${OUT:-$root/_output/k8s/1.36/bin}
	kbins=(kube-apiserver kubelet)
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

# build NAME MODULE_DIR PACKAGE [LDFLAGS]
build() {
	local name=$1 dir=$2 pkg=$3 ldflags=${4:-} stamp
	stamp=$(stamp_of "$dir")
	if [[ -z ${FORCE:-} && -x $OUT/$name && -f $OUT/$name.stamp && $(cat "$OUT/$name.stamp") == "$stamp" ]]; then
		echo "build-k8s: $name up to date"
		return
	fi
	echo "build-k8s: building $name ($pkg)"
	local start=$SECONDS
	rm -f "$OUT/$name.stamp"
	(cd "$dir" && "$GO" build -trimpath -ldflags "-s -w $ldflags" -o "$OUT/$name" "$pkg")
	echo "$stamp" >"$OUT/$name.stamp"
	echo "build-k8s: built $name in $((SECONDS - start))s"
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

build etcd "$root/test/e2e/k8sbuild/etcd" .
for b in "${kbins[@]}"; do
	build "$b" "$kube" "k8s.io/kubernetes/cmd/$b" "$kldflags"
done
if [[ -n ${proxy:-} ]]; then
	if [[ $(kube_version "$proxy") != "$kver" ]]; then
		echo "build-k8s: $proxy requires k8s.io/kubernetes $(kube_version "$proxy"), $kube $kver: move both" >&2
		exit 1
	fi
	build kube-proxy "$proxy" k8s.io/kubernetes/cmd/kube-proxy "$kldflags"
fi
