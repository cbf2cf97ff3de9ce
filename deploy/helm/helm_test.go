package helm

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// helmBin is the helm the tests run: $STICKYIP_HELM (make test sets it,
// and then a missing binary fails the test), else _output/tools/helm (a
// plain go test skips without it: make helm-tool builds it).
func helmBin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("STICKYIP_HELM"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("STICKYIP_HELM=%s: %v (make helm-tool builds it)", p, err)
		}
		return p
	}
	p := filepath.Join(repoRoot(t), "_output", "tools", "helm")
	if _, err := os.Stat(p); err != nil {
		t.Skipf("no helm at %s: make helm-tool (make test builds it and runs these tests)", p)
	}
	return p
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// render renders the chart with args, failing the test on an error.
func render(t *testing.T, args ...string) []byte {
	t.Helper()
	out, err := Render(helmBin(t), filepath.Join(repoRoot(t), ChartDir), InstallNamespace, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// documents splits a multi-document YAML stream into its non-empty
// documents, each decoded to a generic object.
func documents(t *testing.T, b []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		if len(m) > 0 {
			out = append(out, m)
		}
	}
}

// daemonSet returns the one DaemonSet of a rendering, decoded strictly,
// and the other documents.
func daemonSet(t *testing.T, b []byte) (*appsv1.DaemonSet, []map[string]any) {
	t.Helper()
	var ds *appsv1.DaemonSet
	var rest []map[string]any
	for _, m := range documents(t, b) {
		if m["kind"] != "DaemonSet" {
			rest = append(rest, m)
			continue
		}
		if ds != nil {
			t.Fatal("two DaemonSets rendered")
		}
		j, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		ds = &appsv1.DaemonSet{}
		if err := yaml.UnmarshalStrict(j, ds); err != nil {
			t.Fatalf("the DaemonSet does not decode strictly: %v", err)
		}
	}
	if ds == nil {
		t.Fatalf("no DaemonSet rendered:\n%s", b)
	}
	return ds, rest
}

// TestLint: helm lint --strict passes at the defaults, with the placement
// policies (and a default for StatefulSet pods), in uninstall mode and with
// the k3s values.
func TestLint(t *testing.T) {
	chart := filepath.Join(repoRoot(t), ChartDir)
	for _, args := range [][]string{
		nil,
		{"--set", "placement.enabled=true"},
		{"--set", "placement.enabled=true,placement.statefulSets=10m"},
		{"--set", "uninstall=true"},
		{"-f", filepath.Join(chart, "values-k3s.yaml")},
	} {
		if out, err := Lint(helmBin(t), chart, args...); err != nil {
			t.Errorf("helm lint %v: %v", args, err)
		} else if !bytes.Contains(out, []byte("0 chart(s) failed")) {
			t.Errorf("helm lint %v:\n%s", args, out)
		}
	}
}

// TestInstallManifestIsTheChart: deploy/install/stickyip.yaml is the chart
// rendered at its defaults, byte for byte (make chart writes it), so
// kubectl and Helm users install the same DaemonSet.
func TestInstallManifestIsTheChart(t *testing.T) {
	want, err := InstallFrom(render(t))
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(repoRoot(t), InstallManifest))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is not the chart rendered at its defaults: run make chart (or edit the chart, not the manifest). It should read:\n%s", InstallManifest, want)
	}
}

// TestPlacementIsDeployPlacement: the chart's files/placement/ are the files
// deploy/placement's Kustomization and deploy/placement/nodes' list, byte for
// byte and nothing else; every YAML file of both is listed (kubectl apply -f
// and -k apply the same); and the chart with placement.enabled renders
// exactly their objects besides the DaemonSet (placement off: none of them;
// the nodes' RBAC only with placement.grantNodes).
func TestPlacementIsDeployPlacement(t *testing.T) {
	root := repoRoot(t)
	files, err := PlacementFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	yamls, err := filepath.Glob(filepath.Join(root, PlacementDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := filepath.Glob(filepath.Join(root, NodesDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range append(yamls, nodes...) {
		rel, _ := filepath.Rel(filepath.Join(root, PlacementDir), p)
		if !slices.Contains(files, rel) {
			t.Errorf("%s is not in its Kustomization: kubectl apply -k would skip it, and so would the chart", p)
		}
	}
	var bases []string
	for _, f := range files {
		bases = append(bases, filepath.Base(f))
	}
	copies, err := filepath.Glob(filepath.Join(root, ChartPlacementDir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range copies {
		names = append(names, filepath.Base(p))
	}
	if a, b := slices.Sorted(slices.Values(names)), slices.Sorted(slices.Values(bases)); !slices.Equal(a, b) {
		t.Errorf("the chart's %s holds %v, %s lists %v: run make chart", ChartPlacementDir, a, Kustomization, b)
	}
	var want, policies []string
	for _, f := range files {
		src, err := os.ReadFile(filepath.Join(root, PlacementDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if cp, err := os.ReadFile(filepath.Join(root, ChartPlacementDir, filepath.Base(f))); err != nil || !bytes.Equal(cp, src) {
			t.Errorf("%s/%s differs from %s/%s (%v): run make chart", ChartPlacementDir, f, PlacementDir, f, err)
		}
		for _, m := range documents(t, src) {
			want = append(want, canonical(t, m))
			if !strings.HasPrefix(filepath.Dir(f), "nodes") { // the nodes' RBAC: deploy/placement/nodes
				policies = append(policies, canonical(t, m))
			}
		}
	}
	slices.Sort(want)
	slices.Sort(policies)
	// The RBAC that lets nodes write the index only once the index policy
	// is in the API server: helm template has no API server, so "auto"
	// renders the policies alone.
	for _, c := range []struct {
		grant string
		want  []string
	}{{"always", want}, {"auto", policies}, {"never", policies}} {
		_, rest := daemonSet(t, render(t, "--set", "placement.enabled=true", "--set", "placement.grantNodes="+c.grant))
		var got []string
		for _, m := range rest {
			got = append(got, canonical(t, m))
		}
		slices.Sort(got)
		if !slices.Equal(got, c.want) {
			t.Errorf("placement.enabled, grantNodes %s: renders %d objects besides the DaemonSet, want %d of deploy/placement, or they differ:\n%s\nwant:\n%s",
				c.grant, len(got), len(c.want), strings.Join(got, "\n"), strings.Join(c.want, "\n"))
		}
	}
	if _, rest := daemonSet(t, render(t)); len(rest) != 0 {
		t.Errorf("placement off renders %d objects besides the DaemonSet", len(rest))
	}
}

func canonical(t *testing.T, m map[string]any) string {
	t.Helper()
	b, err := json.Marshal(m) // map keys sorted
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestGenerateWrites: Generate, run on a copy of the sources, writes the
// files this tree holds: make chart is what keeps them equal.
func TestGenerateWrites(t *testing.T) {
	root := repoRoot(t)
	tmp := t.TempDir()
	for _, dir := range []string{ChartDir, PlacementDir, filepath.Dir(InstallManifest)} {
		copyTree(t, filepath.Join(root, dir), filepath.Join(tmp, dir))
	}
	// A stale copy the Kustomization no longer lists goes.
	stale := filepath.Join(tmp, ChartPlacementDir, "gone.yaml")
	if err := os.WriteFile(stale, []byte("kind: ConfigMap\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, InstallManifest), []byte("edited by hand\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Generate(helmBin(t), tmp); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a copy the Kustomization does not list was left: %v", err)
	}
	for _, f := range []string{InstallManifest} {
		got, _ := os.ReadFile(filepath.Join(tmp, f))
		want, _ := os.ReadFile(filepath.Join(root, f))
		if !bytes.Equal(got, want) {
			t.Errorf("Generate wrote another %s than this tree's: run make chart", f)
		}
	}
}

func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}
