# The demo: a pod keeps its IP, on this machine, in about a second.
# A throwaway node and pods (network namespaces), the real bridge plugin and
# stickyip on a private range, driven by cnitool; everything it made is
# removed at exit, the host's CNI config and stores are not touched. Needs
# root; builds the plugin, and cnitool and the bridge plugin (pinned, into
# _output/) when missing. scripts/demo.sh says what it shows; the
# integration tier runs it (test/integration/demo_test.go).
.PHONY: demo
demo: build-stickyip
	GO=$(GO) scripts/install-deps.sh demo
	STICKYIP=$(abspath $(BIN)/stickyip) scripts/demo.sh
