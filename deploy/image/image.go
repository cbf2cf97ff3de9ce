// Package image builds the stickyip container image: one layer holding the
// static binaries, no base image, every timestamp fixed, written as an OCI
// image layout archive (oci-layout, index.json, blobs/) that
// `ctr images import`, `docker load`, `podman load` and `skopeo copy
// oci-archive:` read. Same binaries, reference and time: same bytes, same
// digest.
//
// The image format (manifest, config, layer digests and media types, the
// layout's index) is go-containerregistry's; this package only says what goes
// into the image and packs the finished layout directory into one file.
package image

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// File is one file of the image's single layer.
type File struct {
	Path string      // path inside the image, without a leading slash
	Mode fs.FileMode // permission bits
	Data []byte
}

// Spec says what the image holds and how it runs.
type Spec struct {
	Files      []File
	Entrypoint []string
	Labels     map[string]string
	Created    time.Time // every timestamp in the image (SOURCE_DATE_EPOCH)
	Arch       string    // GOARCH of the binaries; runtime.GOARCH when empty
}

// Build returns the image described by spec: OCI media types, one
// uncompressed-tar-then-gzip layer with the files in path order.
func Build(spec Spec) (v1.Image, error) {
	layerTar, err := layerTar(spec.Files, spec.Created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	if img, err = mutate.AppendLayers(img, layer); err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.Architecture, cfg.OS = spec.Arch, "linux"
	if cfg.Architecture == "" {
		cfg.Architecture = runtime.GOARCH
	}
	cfg.Created = v1.Time{Time: spec.Created.UTC()}
	cfg.Config.Entrypoint = spec.Entrypoint
	cfg.Config.Labels = spec.Labels
	cfg.Config.User = "0:0"
	cfg.History = nil
	return mutate.ConfigFile(img, cfg)
}

// layerTar is the layer's content: each file, owned by root, stamped with
// created, in path order.
func layerTar(files []File, created time.Time) ([]byte, error) {
	files = append([]File(nil), files...)
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.Path, Mode: int64(f.Mode.Perm()), Size: int64(len(f.Data)),
			Typeflag: tar.TypeReg, ModTime: created.UTC(), Format: tar.FormatPAX}); err != nil {
			return nil, fmt.Errorf("image: %s: %w", f.Path, err)
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteArchive writes img as an OCI image layout archive at path, named ref
// (annotations org.opencontainers.image.ref.name and io.containerd.image.name,
// the name `ctr images import` gives it), atomically (temp file, rename).
func WriteArchive(path, ref string, img v1.Image, created time.Time) error {
	dir, err := os.MkdirTemp(filepath.Dir(path), ".image-layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	lp, err := layout.Write(filepath.Join(dir, "layout"), empty.Index)
	if err != nil {
		return err
	}
	if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": ref,
		"io.containerd.image.name":          ref,
	})); err != nil {
		return err
	}
	tmp := filepath.Join(dir, "archive.tar")
	if err := tarDir(tmp, string(lp), created); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// tarDir packs the files below root into an archive at out, in path order,
// with fixed owners, modes and times, so the archive depends on nothing but
// the files' content.
func tarDir(out, root string, created time.Time) error {
	var paths []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		paths = append(paths, p)
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(paths)
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	for _, p := range paths {
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		st, err := os.Lstat(p)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: created.UTC(), Format: tar.FormatPAX}
		switch {
		case st.IsDir():
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", 0o755
		case st.Mode().IsRegular():
			h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o644, st.Size()
		default:
			return fmt.Errorf("image: unexpected file type in the layout: %s", p)
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag == tar.TypeReg {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if _, err := tw.Write(b); err != nil {
				return err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Sync()
}
