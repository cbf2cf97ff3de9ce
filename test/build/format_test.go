package build

import (
	"bytes"
	"go/format"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stickyip/stickyip/test/harness"
)

// Every Go file of the repository is as gofmt writes it (build tags and
// test files included: go/format reads them all), so that a diff shows
// only what changed. The directories of build outputs and caches are not
// the repository's.
func TestSourcesGofmt(t *testing.T) {
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch name := d.Name(); {
			case path != root && (strings.HasPrefix(name, ".") || name == "_output" || name == "bin" || name == "results" || name == "testdata"):
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || !d.Type().IsRegular() {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		checked++
		out, err := format.Source(src)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			return nil
		}
		if !bytes.Equal(out, src) {
			rel, _ := filepath.Rel(root, path)
			t.Errorf("%s is not gofmt-clean: run gofmt -w %s", rel, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("checked %d Go files under %s, want the repository's hundreds", checked, root)
	}
	t.Logf("checked %d Go files", checked)
}
