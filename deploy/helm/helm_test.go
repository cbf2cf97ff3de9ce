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
		{"--set", "placement.enabled=true,placement.grantNodes=always,placement.upgradeFromShards=true"},
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
// the Kustomizations of deploy/placement, deploy/placement/nodes,
// former and former/nodes list (but the
// controller's Deployment, which the chart renders from its template), byte
// for byte and nothing else; every YAML file of those directories is listed
// (kubectl apply -k applies it), but the probes; deploy/placement/controller.yaml
// is the chart's template rendered (make chart); and the chart with
// placement.enabled renders exactly deploy/placement's objects besides the
// DaemonSet (placement off: none of them; the nodes' RBAC only with
// placement.grantNodes; the former release's in place of the hint's, and
// the controller's --import-former-index, only with
// placement.upgradeFromShards).
func TestPlacementIsDeployPlacement(t *testing.T) {
	root := repoRoot(t)
	files, err := PlacementFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{PlacementDir, NodesDir, FormerDir, FormerNodesDir} {
		yamls, err := filepath.Glob(filepath.Join(root, dir, "*.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range yamls {
			rel, _ := filepath.Rel(filepath.Join(root, PlacementDir), p)
			if listed := slices.Contains(files, rel); listed == (filepath.Base(rel) == "probe.yaml") {
				t.Errorf("%s: in its Kustomization %v, want %v (kubectl apply -k applies what it lists, and so does the chart)", p, listed, !listed)
			}
		}
	}
	copies, err := chartCopies(root)
	if err != nil {
		t.Fatal(err)
	}
	var held []string
	err = filepath.WalkDir(filepath.Join(root, ChartPlacementDir), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(filepath.Join(root, ChartPlacementDir), p)
			held = append(held, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if a, b := slices.Sorted(slices.Values(held)), slices.Sorted(slices.Values(copies)); !slices.Equal(a, b) {
		t.Errorf("the chart's %s holds %v, the Kustomizations list %v: run make chart", ChartPlacementDir, a, b)
	}
	rendered, err := RenderController(helmBin(t), filepath.Join(root, ChartDir))
	if err != nil {
		t.Fatal(err)
	}
	want, err := ControllerFrom(rendered)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(root, ControllerManifest)); err != nil || !bytes.Equal(got, want) {
		t.Errorf("%s is not the chart's %s rendered (%v): run make chart. It should read:\n%s", ControllerManifest, ControllerTemplate, err, want)
	}
	// Each file's objects, by its directory: "." (deploy/placement),
	// nodes, former, former/nodes.
	byDir := map[string][]string{}
	formerNames := map[string]bool{}
	var replaced []string // deploy/placement's files former/ has one of the same name of
	for _, f := range files {
		src, err := os.ReadFile(filepath.Join(root, PlacementDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(copies, f) {
			if cp, err := os.ReadFile(filepath.Join(root, ChartPlacementDir, f)); err != nil || !bytes.Equal(cp, src) {
				t.Errorf("%s/%s differs from %s/%s (%v): run make chart", ChartPlacementDir, f, PlacementDir, f, err)
			}
		}
		if filepath.Dir(f) == "former" {
			formerNames[filepath.Base(f)] = true
		}
		for _, m := range documents(t, src) {
			byDir[filepath.Dir(f)] = append(byDir[filepath.Dir(f)], canonical(t, m))
		}
	}
	var policies, kept []string // kept: the policies but those former/ replaces
	for _, f := range files {
		if filepath.Dir(f) != "." {
			continue
		}
		src, _ := os.ReadFile(filepath.Join(root, PlacementDir, f))
		for _, m := range documents(t, src) {
			policies = append(policies, canonical(t, m))
			if !formerNames[f] {
				kept = append(kept, canonical(t, m))
			}
		}
		if formerNames[f] {
			replaced = append(replaced, f)
		}
	}
	if len(replaced) == 0 {
		t.Fatalf("former/ replaces none of deploy/placement's files: %v", formerNames)
	}
	join := func(parts ...[]string) []string { return slices.Concat(parts...) }
	nodes, former, formerNodes := byDir["nodes"], byDir["former"], byDir["former/nodes"]
	// While upgrading, the controller imports the former shards' lines.
	importing := func(objs []string) []string {
		out := slices.Clone(objs)
		n := 0
		for i, o := range out {
			if strings.Contains(o, `"kind":"Deployment"`) {
				out[i] = strings.Replace(o, `"args":["--listen-address=:9612"]`, `"args":["--listen-address=:9612","--import-former-index"]`, 1)
				n++
			}
		}
		if n != 1 {
			t.Fatalf("%d Deployments among deploy/placement's objects, want the controller's", n)
		}
		return out
	}
	// The RBAC that lets nodes write their records only once the
	// stickyip-node-records policy is in the API server: helm template has
	// no API server, so "auto" renders the policies alone. While upgrading
	// from the shards, the former hint, opt-in and pod policies in place of
	// the new ones of the same files' names (replaced), and the nodes'
	// former grant only with "always" (or the former index policy in the
	// API server).
	t.Logf("while upgrading from the shards, former/ stands for %v", replaced)
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--set", "placement.grantNodes=always,placement.upgradeFromShards=true"}, join(importing(kept), nodes, former, formerNodes)},
		{[]string{"--set", "placement.grantNodes=always"}, join(policies, nodes)},
		{[]string{"--set", "placement.grantNodes=auto"}, policies},
		{[]string{"--set", "placement.grantNodes=auto,placement.upgradeFromShards=true"}, join(importing(kept), former)},
		{[]string{"--set", "placement.grantNodes=never,placement.upgradeFromShards=true"}, join(importing(kept), former)},
	} {
		_, rest := daemonSet(t, render(t, append([]string{"--set", "placement.enabled=true"}, c.args...)...))
		var got []string
		for _, m := range rest {
			got = append(got, canonical(t, m))
		}
		slices.Sort(got)
		want := slices.Sorted(slices.Values(c.want))
		if !slices.Equal(got, want) {
			t.Errorf("placement.enabled, %v: renders %d objects besides the DaemonSet, want %d of deploy/placement, or they differ:\n%s\nwant:\n%s",
				c.args, len(got), len(want), strings.Join(got, "\n"), strings.Join(want, "\n"))
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
	staleNodes := filepath.Join(tmp, ChartPlacementDir, "nodes", "gone.yaml")
	for _, p := range []string{stale, staleNodes} {
		if err := os.WriteFile(p, []byte("kind: ConfigMap\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{InstallManifest, ControllerManifest} {
		if err := os.WriteFile(filepath.Join(tmp, f), []byte("edited by hand\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := Generate(helmBin(t), tmp); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{stale, staleNodes} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a copy no Kustomization lists was left: %v", err)
		}
	}
	for _, f := range []string{InstallManifest, ControllerManifest} {
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
