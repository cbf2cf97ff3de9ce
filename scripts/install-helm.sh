#!/usr/bin/env bash
# install-helm.sh — build the pinned Helm from the Go module proxy into
# $OUT/tools/helm (OUT defaults to <repo>/_output). The unit tier lints and
# renders deploy/helm/stickyip with it; the e2e installs the chart and
# flannel's own chart with it.
#
# Helm 4 (helm.sh/helm/v4), not Helm 3: Helm 3 gets security fixes only
# since its last feature release (v3.22.0) and none after its end of life
# (helm.sh/blog/helm-v3-end-of-life). The chart is apiVersion v2,
# which Helm 3 installs too.
#
# Built in its own module (go install PKG@VERSION), never imported into the
# root module: Helm v4.3.1 requires newer golang.org/x/{text,term,crypto}
# than the Kubernetes 1.37.2 build selects, so importing it would take go.mod
# out of step with test/build. Cost, cold (empty GOCACHE), measured on 2 cores
# loaded by three other sessions: 7.9 min of CPU (6m39s user + 1m12s sys, 14.0
# min wall), shared by no other build (Helm's k8s.io libraries are v0.37.1).
# Helm v3.22.0 measured the same way: 5.5 min of CPU (4m40s + 51s, 14.7 min
# wall); its end of life outweighs the difference.
#
# Idempotent: a binary already built from the pinned version is left alone.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-$ROOT/_output}"
GO="${GO:-go}"

HELM_MODULE=helm.sh/helm/v4
HELM_VERSION=v4.3.1
BIN="$OUT/tools/helm"

if [ -x "$BIN" ] && "$GO" version -m "$BIN" 2>/dev/null |
	awk -v m="$HELM_MODULE" -v v="$HELM_VERSION" '$1 == "mod" && $2 == m && $3 == v { found = 1 } END { exit !found }'; then
	echo "install-helm: $HELM_MODULE@$HELM_VERSION present in $BIN" >&2
	exit 0
fi
mkdir -p "$OUT/tools"
echo "install-helm: go install $HELM_MODULE/cmd/helm@$HELM_VERSION" >&2
start=$SECONDS
# The version Helm reports (helm version) is set by its Makefile's ldflags.
CGO_ENABLED=0 GOBIN="$OUT/tools" GOFLAGS= "$GO" install -trimpath \
	-ldflags "-s -w -X $HELM_MODULE/internal/version.version=$HELM_VERSION" \
	"$HELM_MODULE/cmd/helm@$HELM_VERSION"
echo "install-helm: built in $((SECONDS - start))s" >&2
