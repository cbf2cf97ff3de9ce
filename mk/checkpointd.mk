# checkpointd: the node daemon (checkpointd/cmd/checkpointd).
.PHONY: build-checkpointd install-checkpointd test-checkpointd
build: build-checkpointd

build-checkpointd:
	$(GOBUILD) -o $(BIN)/checkpointd ./checkpointd/cmd/checkpointd

install-checkpointd: build-checkpointd
	install -d $(DESTDIR)$(SBIN_DIR)
	install -m 0755 $(BIN)/checkpointd $(DESTDIR)$(SBIN_DIR)/checkpointd

install: install-checkpointd

# Unit tests of checkpointd only (make test runs them too).
test-checkpointd:
	$(GO) vet ./checkpointd/...
	$(GO) test -count=1 ./checkpointd/...
