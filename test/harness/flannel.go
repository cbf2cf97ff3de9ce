package harness

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// The flannel release the e2e runs (test/e2e/k8sbuild/flannel pins it;
// scripts/build-flannel.sh builds it) and the flannel CNI plugin release
// (scripts/install-deps.sh), with the references of the offline images that
// replace kube-flannel.yml's two images.
const (
	FlannelVersion          = "v0.28.10"
	FlannelCNIPluginVersion = "v0.9.1"
	FlannelImage            = "localhost/stickyip/flannel:" + FlannelVersion
	FlannelCNIPluginImage   = "localhost/stickyip/flannel-cni-plugin:" + FlannelCNIPluginVersion
)

// imagePath is the PATH of the offline images' processes (Debian's).
const imagePath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// iptablesCommands are what flanneld runs for --ip-masq and its forward
// rules (go-iptables, and iptables-restore for its rule sets), both families.
var iptablesCommands = []string{"iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore"}

// FlannelBinDir is where scripts/build-flannel.sh puts flanneld and
// install-conf.
func FlannelBinDir() string { return filepath.Join(OutputDir(), "flannel", "bin") }

// OfflineImage is an image archive the harness built, for
// `ctr images import`.
type OfflineImage struct{ Ref, Archive string }

// BuildFlannelImages builds, into dir, the two images kube-flannel.yml runs,
// from binaries built here (nothing can be pulled):
//
//   - FlannelImage: /opt/bin/flanneld (cgo, dynamically linked) and
//     /opt/bin/install-conf (scripts/build-flannel.sh), the machine's
//     iptables commands (Debian's, with their alternatives symlinks, the
//     xtables extensions, and the shared libraries of all of them as ldd
//     lists them), and a static cp;
//   - FlannelCNIPluginImage: /flannel (the flannel CNI plugin of
//     scripts/install-deps.sh, static) and the static cp.
//
// The cp is test/harness/cp, built here.
func BuildFlannelImages(t testing.TB, dir string) (flannel, cniPlugin OfflineImage) {
	t.Helper()
	bin := FlannelBinDir()
	for _, b := range []string{"flanneld", "install-conf"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			t.Fatalf("harness: %v (run scripts/build-flannel.sh)", err)
		}
	}
	// flanneld prints its version on stderr.
	if out, err := exec.Command(filepath.Join(bin, "flanneld"), "--version").CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != FlannelVersion {
		t.Fatalf("harness: %s --version: %q, %v; want %s (test/e2e/k8sbuild/flannel and harness.FlannelVersion disagree)",
			filepath.Join(bin, "flanneld"), out, err, FlannelVersion)
	}
	cp := filepath.Join(dir, "cp")
	buildCommand(t, "./test/harness/cp", cp)

	fl := newRootfs()
	steps := []error{
		fl.copyWithLibs(filepath.Join(bin, "flanneld"), "opt/bin/flanneld"),
		fl.copyWithLibs(filepath.Join(bin, "install-conf"), "opt/bin/install-conf"),
		fl.copyWithLibs(cp, "usr/bin/cp"),
	}
	for _, c := range iptablesCommands {
		steps = append(steps, fl.hostCommand(c))
	}
	steps = append(steps, fl.xtablesExtensions())
	for _, err := range steps {
		if err != nil {
			t.Fatalf("harness: flannel image: %v", err)
		}
	}
	flannel = writeOfflineImage(t, dir, FlannelImage, fl, "/opt/bin/flanneld")

	plug := newRootfs()
	for _, err := range []error{
		plug.copyWithLibs(filepath.Join(UpstreamBinDir(), "flannel"), "flannel"),
		plug.copyWithLibs(cp, "usr/bin/cp"),
	} {
		if err != nil {
			t.Fatalf("harness: flannel-cni-plugin image: %v", err)
		}
	}
	cniPlugin = writeOfflineImage(t, dir, FlannelCNIPluginImage, plug, "")
	return flannel, cniPlugin
}

// writeOfflineImage writes r as the image ref (entrypoint, when not empty,
// and Debian's PATH) into dir.
func writeOfflineImage(t testing.TB, dir, ref string, r *rootfs, entrypoint string) OfflineImage {
	t.Helper()
	cfg := map[string]any{"Env": []string{imagePath}, "User": "0:0"}
	if entrypoint != "" {
		cfg["Entrypoint"] = []string{entrypoint}
	}
	b, err := ociArchive(ref, r.entries(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.NewReplacer("/", "_", ":", "_").Replace(ref) + ".tar"
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return OfflineImage{Ref: ref, Archive: path}
}

// rootfs is the content of an image's layer, by path (no leading slash).
type rootfs struct{ byPath map[string]LayerEntry }

func newRootfs() *rootfs { return &rootfs{byPath: map[string]LayerEntry{}} }

// entries returns the layer's entries in path order, with a directory entry
// for every parent directory.
func (r *rootfs) entries() []LayerEntry {
	all := map[string]LayerEntry{}
	for p, e := range r.byPath {
		all[p] = e
		for d := filepath.Dir(p); d != "." && d != "/"; d = filepath.Dir(d) {
			if _, ok := r.byPath[d]; !ok {
				all[d] = LayerEntry{Path: d, Mode: 0o755}
			}
		}
	}
	paths := make([]string, 0, len(all))
	for p := range all {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	out := make([]LayerEntry, 0, len(paths))
	for _, p := range paths {
		out = append(out, all[p])
	}
	return out
}

// copyWithLibs puts the host file src at path in the image, with the shared
// libraries it needs (ldd), each at the path the loader finds it by.
func (r *rootfs) copyWithLibs(src, path string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	r.byPath[path] = LayerEntry{Path: path, Mode: int64(fi.Mode().Perm()), Data: data}
	return r.libsOf(src)
}

// libsOf copies the shared libraries ldd lists for the host file src
// (nothing for a static binary) into the image at their host paths.
func (r *rootfs) libsOf(src string) error {
	libs, err := lddPaths(src)
	if err != nil {
		return err
	}
	for _, l := range libs {
		if err := r.copyHost(l, 0); err != nil {
			return err
		}
	}
	return nil
}

// hostCommand copies the machine's /usr/sbin/<name> (Debian's iptables
// commands are symlinks through /etc/alternatives to a multi-call binary
// that dispatches on its name) with every symlink on the way and the
// binary's libraries.
func (r *rootfs) hostCommand(name string) error {
	p := filepath.Join("/usr/sbin", name)
	if err := r.copyHost(p, 0); err != nil {
		return fmt.Errorf("%s (apt-get install iptables): %w", name, err)
	}
	multi, err := filepath.EvalSymlinks(p)
	if err != nil {
		return err
	}
	return r.libsOf(multi)
}

// xtablesExtensions copies the iptables extension libraries (libxt_*.so,
// loaded by the iptables commands for each match and target), found next to
// libxtables, with their own libraries.
func (r *rootfs) xtablesExtensions() error {
	var lib string
	for p := range r.byPath {
		if strings.HasPrefix(filepath.Base(p), "libxtables.so") {
			lib = "/" + p
		}
	}
	if lib == "" {
		return fmt.Errorf("no libxtables among the iptables commands' libraries")
	}
	dir, err := filepath.EvalSymlinks(filepath.Join(filepath.Dir(lib), "xtables"))
	if err != nil {
		return err
	}
	if err := r.copyHost(dir, 0); err != nil {
		return err
	}
	sos, err := filepath.Glob(filepath.Join(dir, "*.so"))
	if err != nil {
		return err
	}
	for _, so := range sos {
		if err := r.libsOf(so); err != nil {
			return err
		}
	}
	return nil
}

// copyHost copies the host path p into the image at the same path, keeping
// every symlink met on the way (a directory such as /lib -> usr/lib, or the
// file itself) as a symlink and copying what it points to; a directory is
// copied whole.
func (r *rootfs) copyHost(p string, depth int) error {
	if depth > 40 {
		return fmt.Errorf("%s: too many symlinks", p)
	}
	parts := strings.Split(strings.TrimPrefix(filepath.Clean(p), "/"), "/")
	for i := 1; i <= len(parts); i++ {
		prefix := strings.Join(parts[:i], "/")
		fi, err := os.Lstat("/" + prefix)
		if err != nil {
			return err
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink("/" + prefix)
			if err != nil {
				return err
			}
			r.byPath[prefix] = LayerEntry{Path: prefix, Link: target}
			resolved := target
			if !filepath.IsAbs(target) {
				resolved = filepath.Join("/", filepath.Dir(prefix), target)
			}
			return r.copyHost(filepath.Join(append([]string{resolved}, parts[i:]...)...), depth+1)
		}
		if i < len(parts) {
			continue
		}
		switch {
		case fi.IsDir():
			children, err := os.ReadDir("/" + prefix)
			if err != nil {
				return err
			}
			for _, c := range children {
				if err := r.copyHost("/"+prefix+"/"+c.Name(), depth); err != nil {
					return err
				}
			}
		case fi.Mode().IsRegular():
			data, err := os.ReadFile("/" + prefix)
			if err != nil {
				return err
			}
			r.byPath[prefix] = LayerEntry{Path: prefix, Mode: int64(fi.Mode().Perm()), Data: data}
		default:
			return fmt.Errorf("/%s: not a file, directory or symlink", prefix)
		}
	}
	return nil
}

// lddPaths returns the paths of the shared libraries (the loader included)
// that ldd lists for the ELF file p; none for a static binary.
func lddPaths(p string) ([]string, error) {
	out, err := Run(nil, "ldd", p)
	if err != nil {
		if strings.Contains(out+err.Error(), "not a dynamic executable") {
			return nil, nil
		}
		return nil, err
	}
	var paths []string
	sc := bufio.NewScanner(bytes.NewReader([]byte(out)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			paths = append(paths, f[2]) // libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			paths = append(paths, f[0]) // /lib64/ld-linux-x86-64.so.2 (0x...)
		case len(f) >= 3 && f[1] == "=>" && f[2] == "not":
			return nil, fmt.Errorf("ldd %s: %s", p, sc.Text())
		}
	}
	return paths, sc.Err()
}
