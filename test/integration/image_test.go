//go:build integration

package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stickyip/stickyip/image"
)

// TestImageImport: the image make image builds loads into containerd 2.x
// with `ctr images import` under its reference and digest, and both binaries
// run from it.
func TestImageImport(t *testing.T) {
	n := newNode(t, flannelConf, "stickyip")
	ctd, _ := n.startContainerd(t)
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
	found := false
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[0] == ref {
			found = true
			if f[2] != digest.String() {
				t.Errorf("containerd has %s at %s, the build made %s", ref, f[2], digest)
			}
		}
	}
	if !found {
		t.Fatalf("ctr images ls lacks %s:\n%s", ref, out)
	}
	for i, argv := range [][]string{{"/stickyip", "version"}, {"/checkpointd", "--version"}} {
		id := "image-test-" + strings.TrimPrefix(argv[0], "/")
		out, err := ctd.Ctr(append([]string{"run", "--rm", ref, id}, argv...)...)
		if err != nil || !strings.Contains(out, []string{"stickyip", "checkpointd"}[i]) {
			t.Errorf("ctr run %s %v: %q %v", ref, argv, out, err)
		}
		t.Logf("%v from the image: %s", argv, strings.TrimSpace(out))
	}
}
