package reconcile

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stickyip/stickyip/checkpointd/checkpoint"
)

// A node upgraded during an outage keeps the copy an earlier version wrote
// as stickyip-checkpoint-<ns>_<name>.yaml: it is recognised as the copy in
// place (no second copy of the same pod under the JSON name, which the
// kubelet would run beside it), and removed at hand-back.
func TestLegacyYAMLCopyRecognised(t *testing.T) {
	h := newHarness(t)
	p := pod("web", "uid-1", "nginx:1", true)
	h.api.put(p)
	h.rt.set(sandbox("sb1", p, true))
	h.pass()
	if h.saved(web) == nil {
		t.Fatal("not saved")
	}
	h.api.setReachable(false, h.now)
	h.reboot()
	legacy := filepath.Join(h.static, checkpoint.StaticPrefix+"default_web"+checkpoint.LegacyStaticSuffix)
	if err := os.MkdirAll(h.static, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(legacy, []byte("apiVersion: v1\nkind: Pod\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h.rt.set(copySandbox("sb-copy", "default/web", true))
	h.advance(2 * grace)
	h.pass()
	h.pass()
	if _, err := os.Stat(copyPath(h.static, web)); !os.IsNotExist(err) {
		t.Fatalf("a second copy written beside the legacy one (stat: %v)", err)
	}
	if _, err := os.Stat(legacy); err != nil {
		t.Fatalf("legacy copy removed during the outage: %v", err)
	}
	h.api.setReachable(true, h.now)
	h.pass()
	h.advance(stable + time.Second)
	h.pass()
	if _, err := os.Stat(legacy); !os.IsNotExist(err) {
		t.Fatalf("legacy copy kept after hand-back (stat: %v)", err)
	}
}
