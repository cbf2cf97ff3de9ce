//go:build reliability

package reliability

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stickyip/stickyip/plugins/ipam/stickyip/admin"
	"github.com/stickyip/stickyip/test/harness"
)

// Names shared by every suite.
const (
	annoDuration   = "io.kubernetes.cri/reserved-ip-duration"
	annoIdentity   = "stickyip.io/identity"
	annoIPs        = "stickyip.io/ips"
	dbName         = "stickyip.db"
	lockName       = "stickyip.lock"
	testCNIVersion = "1.1.0"
	// processTimeout bounds every plugin or tool process a suite starts.
	processTimeout = 90 * time.Second
)

// pluginPath returns the absolute path of the plugin binary under test.
func pluginPath(t testing.TB) string {
	t.Helper()
	p := os.Getenv("STICKYIP_BIN")
	if p == "" {
		p = filepath.Join("..", "..", "bin", "stickyip")
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		t.Fatalf("plugin path %q: %v", p, err)
	}
	if st, err := os.Stat(abs); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		t.Fatalf("plugin binary %s not found or not executable (run `make build`, or set STICKYIP_BIN): %v", abs, err)
	}
	return abs
}

// The plugin runner, its call and outcome types and the operator-tool
// helpers live in test/harness, shared by every tier; the suites use them
// under short names.
type (
	cniCall = harness.CNICall
	outcome = harness.Outcome
	plugin  = harness.Plugin
	entry   = admin.Entry
)

func newPlugin(t testing.TB) *plugin {
	return &plugin{Path: pluginPath(t), Timeout: processTimeout}
}

// identityOf is an entry's pod identity, namespace/name/ifname.
func identityOf(e entry) string { return e.Namespace + "/" + e.Name + "/" + e.IfName }

// duplicateIPs returns the IPs that appear in more than one list entry of a network.
func duplicateIPs(es []entry) map[string][]entry {
	by := map[string][]entry{}
	for _, e := range es {
		k := e.Network + " " + e.IP
		by[k] = append(by[k], e)
	}
	dups := map[string][]entry{}
	for k, v := range by {
		if len(v) > 1 {
			dups[k] = v
		}
	}
	return dups
}

// netConf is the suites' network configuration: a stickyip ipam block with
// the given range sets (default one /24), a log file, a long lock timeout,
// no wait for an identity's previous holder, and no host-local import from
// the machine's own state. Tests change the
// returned map before encoding it with encodeConf.
func netConf(network, dataDir, logFile string, ranges ...[]string) map[string]any {
	if len(ranges) == 0 {
		ranges = [][]string{{"10.250.0.0/24"}}
	}
	ipam := harness.IPAM("stickyip", dataDir, ranges...)
	ipam["hostLocalDataDir"] = filepath.Join(filepath.Dir(dataDir), "no-host-local")
	ipam["lockTimeout"] = "60s"
	// The suites count contested ADDs refused with error 11; waiting for the
	// holder (ipam.holderWait) is shown by the plugin's own tests and the e2e.
	ipam["holderWait"] = "0s"
	if logFile != "" {
		ipam["logFile"] = logFile
	}
	return harness.NetConf(testCNIVersion, network, ipam)
}

var (
	withAnnotations      = harness.WithAnnotations
	withValidAttachments = harness.WithValidAttachments
	podArgs              = harness.PodCNIArgs
	ipamOf               = harness.IPAMOf
	clip                 = harness.Clip
)

func encodeConf(t testing.TB, conf map[string]any) []byte {
	t.Helper()
	return harness.Encode(conf)
}

// figures collects counters printed at the end of a suite.
type figures struct {
	mu sync.Mutex
	m  map[string]int
}

func (f *figures) add(k string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[string]int{}
	}
	f.m[k] += n
}

func (f *figures) get(k string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m[k]
}

// String prints the counters sorted by name, one per line.
func (f *figures) String() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	keys := make([]string, 0, len(f.m))
	for k := range f.m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "  %-40s %d\n", k, f.m[k])
	}
	return b.String()
}

// report prints a suite's figures in a block that is easy to grep from CI logs.
func report(t testing.TB, suite string, f *figures, extra ...string) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "\n=== FIGURES %s ===\n", suite)
	b.WriteString(f.String())
	for _, e := range extra {
		fmt.Fprintf(&b, "  %s\n", e)
	}
	t.Log(b.String())
}
