package ipam

import (
	"fmt"
	"os"
	"testing"
)

// missing skips t for a dependency it lacks, or fails it in strict mode:
// harness.Missing, which this package's tests cannot import (harness
// imports ipam).
func missing(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("STICKYIP_STRICT") != "" {
		t.Fatalf("%s (STICKYIP_STRICT is set: a missing dependency fails the test)", msg)
	}
	t.Skipf("skipping: %s", msg)
}
