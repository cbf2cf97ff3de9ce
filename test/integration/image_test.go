//go:build integration

package integration

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stickyip/stickyip/deploy/image"
	"github.com/stickyip/stickyip/test/harness"
)

// TestImageImport: the image make image builds loads into containerd 2.x
// with `ctr images import` under its reference and digest, and both binaries
// run from it.
func TestImageImport(t *testing.T) {
	n := newNode(t, flannelConf, "stickyip")
	ctd, _ := n.startContainerd(t)
	ref := importImage(t, ctd)
	for i, argv := range [][]string{{"/stickyip", "version"}, {"/checkpointd", "--version"}} {
		id := "image-test-" + strings.TrimPrefix(argv[0], "/")
		out, err := ctd.Ctr(append([]string{"run", "--rm", ref, id}, argv...)...)
		if err != nil || !strings.Contains(out, []string{"stickyip", "checkpointd"}[i]) {
			t.Errorf("ctr run %s %v: %q %v", ref, argv, out, err)
		}
		t.Logf("%v from the image: %s", argv, strings.TrimSpace(out))
	}
}

// TestImageInstallsPlugin runs the installer from the image in a container
// with a read-only root, as the DaemonSet does, on a node whose CNI config
// names stickyip but whose CNI bin dir lacks it: the runtime's next pod gets
// its IP through the installed plugin, and a second run changes nothing.
func TestImageInstallsPlugin(t *testing.T) {
	n := newNode(t, flannelConf, "stickyip")
	installed := filepath.Join(n.binDir, "stickyip")
	if err := os.Remove(installed); err != nil { // newNode linked bin/stickyip
		t.Fatal(err)
	}
	ctd, cri := n.startContainerd(t)
	ref := importImage(t, ctd)
	runInstaller := func(id string) string {
		t.Helper()
		out, err := ctd.Ctr("run", "--rm", "--read-only",
			"--mount", "type=bind,src="+n.binDir+",dst="+n.binDir+",options=rbind:rw",
			ref, id, "/checkpointd", "install", "--static-pod=false", "--cni-bin-dir="+n.binDir)
		if err != nil {
			t.Fatalf("installer from the image: %v\n%s", err, out)
		}
		return out
	}
	out := runInstaller("installer-1")
	st, err := os.Lstat(installed)
	if err != nil || !st.Mode().IsRegular() {
		t.Fatalf("after the installer ran (%q): %s: %v %v, want a regular file", out, installed, st, err)
	}
	_, ips := runPod(t, cri, harness.Pod{Name: "web", Namespace: "default", UID: "web-uid"})
	if rows := entriesFor(n.list(t), "default", "web"); len(rows) != 1 || rows[0].IP != ips[0] {
		t.Fatalf("stickyip list for default/web: %+v, want its IP %v: the pod's IP did not come from the installed plugin", rows, ips)
	}
	again := runInstaller("installer-2")
	st2, err := os.Lstat(installed)
	if err != nil || !strings.Contains(again, "unchanged "+installed) ||
		st2.Sys().(*syscall.Stat_t).Ino != st.Sys().(*syscall.Stat_t).Ino || !st2.ModTime().Equal(st.ModTime()) {
		t.Errorf("second install of the same image: %q, inode/mtime %v→%v; want unchanged", again, st.ModTime(), st2.ModTime())
	}
	t.Logf("installer: %s; pod default/web got %v through the installed plugin; again: %s",
		strings.TrimSpace(out), ips, strings.TrimSpace(again))
}

// importImage builds the image from make build's binaries, imports it with
// ctr and checks containerd holds it under the digest the build reports. It
// returns the image's reference.
func importImage(t *testing.T, ctd *harness.Containerd) string {
	t.Helper()
	plugin := stickyipBin(t)
	spec := image.Spec{Entrypoint: []string{"/checkpointd"}, Created: time.Unix(1700000000, 0)}
	for _, name := range []string{"stickyip", "checkpointd"} {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(plugin), name))
		if err != nil {
			t.Fatalf("%v (make build)", err)
		}
		spec.Files = append(spec.Files, image.File{Path: name, Mode: 0o755, Data: b})
	}
	img, err := image.Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	digest, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	const ref = "localhost/stickyip/stickyip:integration"
	archive := filepath.Join(t.TempDir(), "image.tar")
	if err := image.WriteArchive(archive, ref, img, spec.Created); err != nil {
		t.Fatal(err)
	}
	if out, err := ctd.Ctr("images", "import", archive); err != nil {
		t.Fatalf("ctr images import: %v\n%s", err, out)
	}
	out, err := ctd.Ctr("images", "ls")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[0] == ref {
			if f[2] != digest.String() {
				t.Fatalf("containerd has %s at %s, the build made %s", ref, f[2], digest)
			}
			return ref
		}
	}
	t.Fatalf("ctr images ls lacks %s:\n%s", ref, out)
	return ""
}
