# The Helm chart: deploy/helm/stickyip. The unit tests lint and
# render it with the pinned Helm (scripts/install-helm.sh builds it into
# _output/tools/helm; the e2e installs the chart and flannel's own with it).
#
#   make chart    # after editing the chart or deploy/placement: rewrites
#                 # deploy/install/stickyip.yaml, deploy/placement/controller.yaml
#                 # and the chart's copy of deploy/placement
HELM := $(CURDIR)/_output/tools/helm

.PHONY: helm-tool chart
helm-tool:
	GO=$(GO) scripts/install-helm.sh

chart: helm-tool
	$(GO) run ./deploy/helm/cmd/gendeploy -helm $(HELM)

# The unit tests of deploy/helm fail (not skip) when STICKYIP_HELM is set
# and names no helm.
test: helm-tool
test: export STICKYIP_HELM := $(HELM)
e2e-deps: helm-tool
