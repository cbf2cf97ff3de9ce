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
	return ociArchive(ref, []LayerEntry{{Path: "pause", Mode: 0o755, Data: exe}},
		map[string]any{"Entrypoint": []string{"/pause"}, "User": "0:0"})
}

// LayerEntry is one entry of an image's single layer: a regular file (Data),
// a symlink (Link, its target as written) or, with neither, a directory.
type LayerEntry struct {
	Path string // inside the image, without a leading slash
	Mode int64  // permission bits (files and directories)
	Data []byte
	Link string
}

// ociArchive packs entries as one uncompressed layer of an OCI image layout
// archive (oci-layout, index.json, blobs/sha256/*) named ref, whose image
// config's "config" (Entrypoint, Env, ...) is cfg. Every timestamp is the
// epoch, so the same entries give the same archive.
func ociArchive(ref string, entries []LayerEntry, cfg map[string]any) ([]byte, error) {
	epoch := time.Unix(0, 0).UTC()
	var layer bytes.Buffer
	lw := tar.NewWriter(&layer)
	for _, e := range entries {
		h := &tar.Header{Name: e.Path, Mode: e.Mode, ModTime: epoch, Format: tar.FormatPAX}
		switch {
		case e.Link != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, e.Link, 0o777
		case e.Data == nil:
			h.Typeflag, h.Name = tar.TypeDir, e.Path+"/"
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.Data))
		}
		if err := lw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := lw.Write(e.Data); err != nil {
				return nil, err
			}
		}
	}
	if err := lw.Close(); err != nil {
		return nil, err
	}
	layerDesc := blobDescriptor(mediaTypeLayer, layer.Bytes())

	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"created":      epoch.Format(time.RFC3339),
		"config":       cfg,
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
