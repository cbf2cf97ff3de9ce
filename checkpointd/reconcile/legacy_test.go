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

// A checkpointd of this version that stops during an outage sets aside a
// copy an earlier version wrote under the legacy .yaml name like any other,
// so the restarted daemon puts back that very file (same name, same bytes:
// the same pod for the kubelet) instead of writing a JSON copy beside it.
func TestLegacyYAMLCopyStashedAtStop(t *testing.T) {
	static, volumes := t.TempDir(), t.TempDir()
	name := checkpoint.StaticPrefix + "default_web" + checkpoint.LegacyStaticSuffix
	body := []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: web}\n")
	if err := os.WriteFile(filepath.Join(static, name), body, 0o600); err != nil {
		t.Fatal(err)
	}
	removed, err := StopCopies(static, volumes)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || filepath.Base(removed[0]) != name {
		t.Fatalf("removed %v, want the legacy manifest %s", removed, name)
	}
	got, data, ok := stashed(volumes, web)
	if !ok || got != name || string(data) != string(body) {
		t.Fatalf("stashed = %q, %q, %v; want %q with its exact bytes", got, data, ok, name)
	}
}
