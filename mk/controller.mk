# stickyip-controller: the placement index's one writer
# (controller/cmd/stickyip-controller), a Deployment on the control plane.
.PHONY: build-controller install-controller test-controller
build: build-controller

build-controller:
	$(GOBUILD) -o $(BIN)/stickyip-controller ./controller/cmd/stickyip-controller

install-controller: build-controller
	install -d $(DESTDIR)$(SBIN_DIR)
	install -m 0755 $(BIN)/stickyip-controller $(DESTDIR)$(SBIN_DIR)/stickyip-controller

install: install-controller

# Unit tests of the controller only (make test runs them too).
test-controller:
	$(GO) vet ./controller/...
	$(GO) test -count=1 ./controller/...
