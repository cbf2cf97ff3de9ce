package harness

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The etcd release the e2e builds (test/e2e/k8sbuild/etcd pins it) and the
// reference of the offline image BuildEtcdImage makes of it.
const (
	EtcdVersion = "3.6.5"
	EtcdImage   = "localhost/stickyip/etcd:v" + EtcdVersion
)

// Paths in the etcd image.
const (
	EtcdImageBinary     = "/usr/local/bin/etcd"
	EtcdImageEntrypoint = "/etcdmember"
)

// BuildEtcdImage builds, into dir, EtcdImage: the static etcd at etcdBin
// (scripts/build-k8s.sh's, checked to be EtcdVersion) at EtcdImageBinary
// and test/harness/etcdmember, built here, as its entrypoint. Nothing else
// is in it: no shell, no library (both are static).
func BuildEtcdImage(t testing.TB, dir, etcdBin string) OfflineImage {
	t.Helper()
	out, err := exec.Command(etcdBin, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "etcd Version: "+EtcdVersion+"\n") {
		t.Fatalf("harness: %s --version: %v\n%s\nwant etcd %s (test/e2e/k8sbuild/etcd and harness.EtcdVersion disagree)", etcdBin, err, out, EtcdVersion)
	}
	member := filepath.Join(dir, "etcdmember")
	buildCommand(t, "./test/harness/etcdmember", member)
	r := newRootfs()
	for path, src := range map[string]string{EtcdImageBinary: etcdBin, EtcdImageEntrypoint: member} {
		if err := r.copyWithLibs(src, strings.TrimPrefix(path, "/")); err != nil {
			t.Fatalf("harness: etcd image: %v", err)
		}
	}
	// etcd writes its data under the volume; /tmp for anything else.
	r.byPath["tmp"] = LayerEntry{Path: "tmp", Mode: 0o1777}
	img := writeOfflineImage(t, dir, EtcdImage, r, EtcdImageEntrypoint)
	if fi, err := os.Stat(img.Archive); err == nil {
		t.Logf("harness: %s built (%d MB)", EtcdImage, fi.Size()>>20)
	}
	return img
}
