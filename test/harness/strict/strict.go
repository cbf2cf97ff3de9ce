// Package strict is the test harness's strict mode (harness.StrictEnv) on
// its own, for the tests of the packages the harness imports (ipam, the
// bbolt store), which cannot import the harness.
package strict

import (
	"fmt"
	"os"
	"testing"
)

// Env names the environment variable of strict mode: set (to anything), a
// dependency a test needs that is missing fails the test instead of
// skipping it. make's test tiers set it (mk/*.mk, scripts/run-e2e.sh): they
// install what the tests need first, so a missing tool there is a broken
// install step, and a tier that skipped its tests would pass having run
// none.
const Env = "STICKYIP_STRICT"

// On reports whether strict mode is on.
func On() bool { return os.Getenv(Env) != "" }

// Missing skips t for a missing dependency (why), or fails it in strict
// mode.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if On() {
		t.Fatalf("%s (%s is set: a missing dependency fails the test)", msg, Env)
	}
	t.Skipf("skipping: %s", msg)
}
