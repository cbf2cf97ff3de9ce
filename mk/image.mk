# The container image: stickyip, checkpointd and stickyip-controller, static, in one
# layer with no base image, as an OCI image layout archive. Offline and
# reproducible: every timestamp is SOURCE_DATE_EPOCH (the last commit's time
# by default), so the same commit gives the same archive and digest.
#
#   make image                                   # bin/stickyip-image.tar, stickyip/stickyip:$(VERSION)
#   make image IMAGE=registry.example/stickyip:v1
#   ctr -n k8s.io images import bin/stickyip-image.tar   # on each node, or push it to a registry
IMAGE             ?= stickyip/stickyip:$(VERSION)
IMAGE_ARCHIVE     ?= $(BIN)/stickyip-image.tar
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)

.PHONY: image
image: build
	$(GO) run ./deploy/image/cmd/mkimage -o $(IMAGE_ARCHIVE) -ref $(IMAGE) -version $(VERSION) \
		-epoch $(SOURCE_DATE_EPOCH) stickyip=$(BIN)/stickyip checkpointd=$(BIN)/checkpointd \
		stickyip-controller=$(BIN)/stickyip-controller
