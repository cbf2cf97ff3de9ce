# Reliability tier: the real plugin binary under concurrency, SIGKILL,
# damaged stores and bad input, then every fuzz target for a bounded time.
# Needs root for the network namespaces, tmpfs and read-only mounts (cases that
# need it skip with a message otherwise). About 6 minutes on 2 cores (suites ~3.5 min, fuzzing 120 s).
#
#   make test-reliability                    # suites + fuzzing
#   make test-reliability-suites             # suites only
#   make test-fuzz FUZZ_BUDGET=900           # fuzzing only, longer (up to FUZZTIME per target)
#   RELIABILITY_SEED=123 make test-reliability-suites   # repeat a random run
#
# Knobs (environment): RELIABILITY_WORKERS (16), RELIABILITY_OPS_PER_WORKER (200),
# RELIABILITY_KILLS (300), RELIABILITY_CRASH_SECONDS (150), FUZZTIME (25s),
# FUZZ_BUDGET (120 seconds for all fuzz targets together in CI; fuzz.sh alone: 240).

TEST_TIERS += test-reliability

RELIABILITY_TIMEOUT ?= 9m
FUZZTIME            ?= 25s
FUZZ_BUDGET         ?= 120
FUZZ_TAGS           ?= reliability

.PHONY: test-reliability test-reliability-suites test-fuzz reliability-deps

test-reliability: test-reliability-suites test-fuzz

# strace checks the order of writes, syncs and the answer (TestDurabilitySync).
reliability-deps:
	@command -v strace >/dev/null 2>&1 || { \
		echo "reliability-deps: apt-get install strace"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get install -y -qq strace >/dev/null 2>&1 || \
		{ apt-get update -qq && apt-get install -y -qq --no-install-recommends strace >/dev/null; }; }

# Strict mode (harness.StrictEnv): a missing dependency (root, strace) fails
# the test instead of skipping it.
test-reliability-suites: export STICKYIP_STRICT := 1
test-reliability-suites: build reliability-deps
	STICKYIP_BIN=$(abspath $(BIN)/stickyip) $(GO) test -tags reliability -count=1 -v \
		-timeout $(RELIABILITY_TIMEOUT) ./test/reliability/

test-fuzz: export STICKYIP_STRICT := 1
test-fuzz: build
	GO=$(GO) FUZZTIME=$(FUZZTIME) FUZZ_BUDGET=$(FUZZ_BUDGET) FUZZ_TAGS=$(FUZZ_TAGS) STICKYIP_BIN=$(abspath $(BIN)/stickyip) sh test/reliability/fuzz.sh
