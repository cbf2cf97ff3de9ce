package harness

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// PauseImage is the reference under which the harness imports its pause image.
const PauseImage = "localhost/stickyip/pause:test"

// OCI media types used in the image layout.
const (
	mediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	mediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar"
)

type ociDescriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    *ociPlatform      `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type ociPlatform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

// BuildPauseImage compiles test/harness/pause as a static binary and writes an
// OCI image layout tarball holding it as /pause, named ref, into dir.
// It returns the tarball's path, for `ctr images import`.
func BuildPauseImage(t testing.TB, dir, ref string) string {
	t.Helper()
	bin := filepath.Join(dir, "pause")
	buildCommand(t, "./test/harness/pause", bin)
	exe, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	tarball, err := pauseLayout(exe, ref)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "pause-oci.tar")
	if err := os.WriteFile(path, tarball, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// buildCommand compiles the project's main package pkg (a path relative to
// the repository root) as a static binary at out.
func buildCommand(t testing.TB, pkg, out string) {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Run([]string{"CGO_ENABLED=0"}, "go", "build", "-C", root, "-trimpath", "-ldflags=-s -w",
		"-o", out, pkg); err != nil {
		t.Fatal(err)
	}
}

// pauseLayout packs exe as an OCI image layout archive (oci-layout,
// index.json, blobs/sha256/*) with one uncompressed layer.
func pauseLayout(exe []byte, ref string) ([]byte, error) {
	epoch := time.Unix(0, 0).UTC()
	var layer bytes.Buffer
	lw := tar.NewWriter(&layer)
	if err := lw.WriteHeader(&tar.Header{Name: "pause", Mode: 0o755, Size: int64(len(exe)),
		Typeflag: tar.TypeReg, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
		return nil, err
	}
	if _, err := lw.Write(exe); err != nil {
		return nil, err
	}
	if err := lw.Close(); err != nil {
		return nil, err
	}
	layerDesc := blobDescriptor(mediaTypeLayer, layer.Bytes())

	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"created":      epoch.Format(time.RFC3339),
		"config":       map[string]any{"Entrypoint": []string{"/pause"}, "User": "0:0"},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{layerDesc.Digest}},
	})
	if err != nil {
		return nil, err
	}
	configDesc := blobDescriptor(mediaTypeConfig, config)

	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaTypeManifest,
		"config":        configDesc,
		"layers":        []ociDescriptor{layerDesc},
	})
	if err != nil {
		return nil, err
	}
	manifestDesc := blobDescriptor(mediaTypeManifest, manifest)
	manifestDesc.Platform = &ociPlatform{Architecture: runtime.GOARCH, OS: "linux"}
	manifestDesc.Annotations = map[string]string{
		"io.containerd.image.name":          ref,
		"org.opencontainers.image.ref.name": ref,
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"manifests":     []ociDescriptor{manifestDesc},
	})
	if err != nil {
		return nil, err
	}

	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	files := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{blobPath(layerDesc), layer.Bytes()},
		{blobPath(configDesc), config},
		{blobPath(manifestDesc), manifest},
	}
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Name: dir, Mode: 0o755, Typeflag: tar.TypeDir, ModTime: epoch}); err != nil {
			return nil, err
		}
	}
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)),
			Typeflag: tar.TypeReg, ModTime: epoch}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

func blobDescriptor(mediaType string, data []byte) ociDescriptor {
	return ociDescriptor{MediaType: mediaType, Digest: fmt.Sprintf("sha256:%x", sha256.Sum256(data)), Size: int64(len(data))}
}

func blobPath(d ociDescriptor) string {
	return "blobs/sha256/" + d.Digest[len("sha256:"):]
}
