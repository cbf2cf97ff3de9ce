// Package build checks the build's own invariants.
package build

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stickyip/stickyip/test/harness"
)

// requires returns the module versions a go.mod requires (both blocks).
func requires(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	inBlock := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(strings.SplitN(sc.Text(), "//", 2)[0])
		switch {
		case line == "require (":
			inBlock = true
			continue
		case inBlock && line == ")":
			inBlock = false
			continue
		case strings.HasPrefix(line, "require "):
			line = strings.TrimPrefix(line, "require ")
		case !inBlock:
			continue
		}
		if f := strings.Fields(line); len(f) == 2 {
			out[f[0]] = f[1]
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// The main module and the module that builds the e2e's Kubernetes
// binaries select the same version of every module both require: then
// the Go build cache compiles client-go, api, grpc and the rest once for
// both (a cold CI compiles them for the unit tier and reuses them for the
// Kubernetes build). A `go get` in one that leaves the other behind
// compiles them twice.
func TestMainModuleMatchesKubernetesBuild(t *testing.T) {
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	main := requires(t, filepath.Join(root, "go.mod"))
	kube := requires(t, filepath.Join(root, "test", "e2e", "k8sbuild", "kube", "go.mod"))
	if len(main) == 0 || kube["k8s.io/kubernetes"] == "" {
		t.Fatalf("read %d requirements of go.mod and k8s.io/kubernetes %q of the Kubernetes build", len(main), kube["k8s.io/kubernetes"])
	}
	shared := 0
	for mod, v := range main {
		kv, ok := kube[mod]
		if !ok {
			continue
		}
		shared++
		if kv != v {
			t.Errorf("%s: go.mod requires %s, test/e2e/k8sbuild/kube %s; require the same version in both", mod, v, kv)
		}
	}
	t.Logf("%d modules required by both, same versions", shared)
}
