# Mutation testing: go-gremlins (pinned, built into _output/tools) mutates
# the packages that decide, one at a time with one worker, and
# test/mutate judges each package's figures, the equivalent mutants of
# test/mutate/equivalent.txt taken out. Not a test tier: run it before
# submitting a change to one of these packages (docs/testing.md, "Mutation
# testing").
#
#   make mutate                     # every package of MUTATE_PACKAGES
#   make mutate-changed             # those changed since MUTATE_BASE (main)
#   make mutate MUTATE_PACKAGES=./checkpointd/state
GREMLINS_VERSION := v0.6.0
GREMLINS         := $(CURDIR)/_output/tools/gremlins
GREMLINS_STAMP   := $(CURDIR)/_output/tools/.gremlins-$(GREMLINS_VERSION)

MUTATE_PACKAGES ?= ./ipam ./reservation/boltstore ./checkpointd/state ./checkpointd/sanitize \
	./checkpointd/policy ./checkpointd/rebuild ./checkpointd/retention ./checkpointd/placement \
	./controller/retention ./controller/claims ./controller/index ./plugins/ipam/stickyip/cni
# Of checkpointd/rebuild, its decisions (plan, takeback, reservations, gate)
# are mutated; the files that read its sources and say what it did are not.
# Of checkpointd/placement, what the node publishes and how it reads the
# controller's verdicts (desired, verdicts, publisher); not its API client,
# its watch of the record or the administrator's listing of stranded pods.
MUTATE_SKIP       ?= checkpointd/rebuild/rebuild.go checkpointd/rebuild/report.go checkpointd/rebuild/indexwait.go \
	checkpointd/rebuild/newstore.go checkpointd/rebuild/netns.go checkpointd/rebuild/placement.go \
	checkpointd/placement/api.go checkpointd/placement/watcher.go checkpointd/placement/stranded.go
MUTATE_BASE       ?=
MUTATE_EFFICACY   ?= 90
MUTATE_COVERAGE   ?= 85
MUTATE_WORKERS    ?= 1

.PHONY: mutate mutate-changed gremlins-tool
gremlins-tool: $(GREMLINS_STAMP)

$(GREMLINS_STAMP):
	GOBIN=$(CURDIR)/_output/tools $(GO) install github.com/go-gremlins/gremlins/cmd/gremlins@$(GREMLINS_VERSION)
	touch $@

# Niced: the mutants' compiles and tests yield to other work on the host.
mutate: gremlins-tool
	nice -n 10 $(GO) run ./test/mutate -gremlins $(GREMLINS) -equivalent test/mutate/equivalent.txt -out _output/mutate \
		-efficacy $(MUTATE_EFFICACY) -coverage $(MUTATE_COVERAGE) -workers $(MUTATE_WORKERS) -skip '$(strip $(MUTATE_SKIP))' \
		$(if $(MUTATE_BASE),-base $(MUTATE_BASE)) $(MUTATE_PACKAGES)

mutate-changed:
	$(MAKE) --no-print-directory mutate MUTATE_BASE=$(or $(MUTATE_BASE),main)
