package image

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

func testSpec(epoch int64) Spec {
	return Spec{
		Files: []File{
			{Path: "stickyip", Mode: 0o755, Data: []byte("#!plugin\n")},
			{Path: "checkpointd", Mode: 0o755, Data: []byte("#!daemon\n")},
		},
		Entrypoint: []string{"/checkpointd"},
		Created:    time.Unix(epoch, 0),
	}
}

// build writes an archive of spec named ref into a fresh directory and
// returns its bytes and the image's digest.
func build(t *testing.T, spec Spec, ref string) ([]byte, v1.Hash) {
	t.Helper()
	img, err := Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "image.tar")
	if err := WriteArchive(out, ref, img, spec.Created); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return b, d
}

func TestBuildIsReproducible(t *testing.T) {
	a, da := build(t, testSpec(1700000000), "stickyip/stickyip:v1")
	// Files given in another order, at another wall-clock time: same image.
	spec := testSpec(1700000000)
	spec.Files[0], spec.Files[1] = spec.Files[1], spec.Files[0]
	time.Sleep(1100 * time.Millisecond)
	b, db := build(t, spec, "stickyip/stickyip:v1")
	if da != db || !bytes.Equal(a, b) {
		t.Fatalf("two builds differ: %s (sha256 %x) vs %s (sha256 %x)", da, sha256.Sum256(a), db, sha256.Sum256(b))
	}
	if _, dc := build(t, testSpec(1700000001), "stickyip/stickyip:v1"); dc == da {
		t.Errorf("another SOURCE_DATE_EPOCH gave the same digest %s", dc)
	}
	other := testSpec(1700000000)
	other.Files[0].Data = []byte("#!plugin v2\n")
	if _, dd := build(t, other, "stickyip/stickyip:v1"); dd == da {
		t.Errorf("another binary gave the same digest %s", dd)
	}
}

// TestArchiveLayout reads the archive as an OCI layout: the index names the
// image by its reference, the manifest digest is the one Build reports, and
// the layer holds the binaries, executable, owned by root, at the epoch.
func TestArchiveLayout(t *testing.T) {
	spec := testSpec(1700000000)
	data, digest := build(t, spec, "registry.example/stickyip:v1")
	dir := t.TempDir()
	untar(t, data, dir)
	for _, f := range []string{"oci-layout", "index.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatalf("archive lacks %s: %v", f, err)
		}
	}
	var index v1.IndexManifest
	b, _ := os.ReadFile(filepath.Join(dir, "index.json"))
	if err := json.Unmarshal(b, &index); err != nil {
		t.Fatal(err)
	}
	if len(index.Manifests) != 1 {
		t.Fatalf("index has %d manifests, want 1", len(index.Manifests))
	}
	m := index.Manifests[0]
	if m.Digest != digest || m.Annotations["io.containerd.image.name"] != "registry.example/stickyip:v1" ||
		m.Annotations["org.opencontainers.image.ref.name"] != "registry.example/stickyip:v1" {
		t.Errorf("index entry %+v, want digest %s named registry.example/stickyip:v1", m, digest)
	}
	img, err := layout.Path(dir).Image(digest)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OS != "linux" || len(cfg.Config.Entrypoint) != 1 || cfg.Config.Entrypoint[0] != "/checkpointd" ||
		!cfg.Created.Time.Equal(spec.Created) {
		t.Errorf("config: os %q entrypoint %v created %v", cfg.OS, cfg.Config.Entrypoint, cfg.Created)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Mode != 0o755 || h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(spec.Created) {
			t.Errorf("%s: mode %o uid %d gid %d mtime %v", h.Name, h.Mode, h.Uid, h.Gid, h.ModTime)
		}
	}
	if len(names) != 2 || names[0] != "checkpointd" || names[1] != "stickyip" {
		t.Errorf("layer holds %v, want [checkpointd stickyip]", names)
	}
}

func untar(t *testing.T, data []byte, dir string) {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, h.Name)
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
