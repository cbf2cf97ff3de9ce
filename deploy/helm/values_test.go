package helm

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	// the JSON Patch kustomize applies (RFC 6902), already in the module
	// graph through client-go
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
)

// env returns the installer container's environment as a map; a name set
// twice fails the test (server-side apply refuses duplicate keys).
func env(t *testing.T, ds *appsv1.DaemonSet) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, e := range ds.Spec.Template.Spec.Containers[0].Env {
		if _, dup := out[e.Name]; dup {
			t.Errorf("env %s set twice", e.Name)
		}
		out[e.Name] = e.Value
	}
	return out
}

// hostPaths returns the installer's hostPath volumes by mount path, failing
// the test when a volume is mounted elsewhere than its host path (the
// static pod it writes names host paths).
func hostPaths(t *testing.T, ds *appsv1.DaemonSet) map[string]string {
	t.Helper()
	spec := ds.Spec.Template.Spec
	byName := map[string]string{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			byName[v.Name] = v.HostPath.Path
		}
	}
	out := map[string]string{}
	for _, m := range spec.Containers[0].VolumeMounts {
		if p, ok := byName[m.Name]; ok {
			if p != m.MountPath {
				t.Errorf("volume %s: host path %s mounted at %s", m.Name, p, m.MountPath)
			}
			out[m.MountPath] = m.Name
		}
	}
	return out
}

// TestValues: each value users set reaches the DaemonSet where it acts:
// the image (the container's and the static pod's, always the same), the
// node's paths (env for checkpointd, and the mounts at the same paths), the
// data and checkpoint directories, the namespace policy, extra checkpointd
// settings, the installer's scheduling (tolerations, node selector,
// priority class, resources), the uninstall mode and the systemd-unit mode.
func TestValues(t *testing.T) {
	ds, rest := daemonSet(t, render(t,
		"--namespace", "stickyip-system",
		"--set", "image.repository=registry.example:5000/stickyip,image.tag=v9.9.9",
		"--set", "node.cniBinDir=/cni/bin,node.cniConfDir=/cni/conf,node.staticPodDir=/kubelet/static",
		"--set", "node.kubeconfig=/kubelet/kubeconfig,node.criSocket=/run/crio/crio.sock",
		"--set", "dataDir=/data/stickyip,checkpointd.checkpointDir=/data/checkpoints,checkpointd.volumeDir=/run/ckpt",
		"--set", "checkpointd.allowNamespaces=kube-system\\,edge,checkpointd.allowPrivilegedNamespaces=edge",
		"--set", "checkpointd.env.GRACE_PERIOD=45s,checkpointd.env.LOG_LEVEL=debug",
		"--set", "priorityClassName=edge-critical", "--set-string", "nodeSelector.edge=true",
		"--set", "tolerations[0].key=edge,tolerations[0].operator=Exists,tolerations[0].effect=NoSchedule",
		"--set", "resources.requests.cpu=20m,resources.limits.memory=128Mi",
	))
	if len(rest) != 0 {
		t.Errorf("%d objects besides the DaemonSet", len(rest))
	}
	if ds.Namespace != "stickyip-system" {
		t.Errorf("namespace %s, want the release's", ds.Namespace)
	}
	spec := ds.Spec.Template.Spec
	c := spec.Containers[0]
	const img = "registry.example:5000/stickyip:v9.9.9"
	if c.Image != img || !reflect.DeepEqual(c.Args, []string{"install", "--wait", "--image=" + img}) {
		t.Errorf("image %s, args %v: want %s in both", c.Image, c.Args, img)
	}
	wantEnv := map[string]string{
		"CHECKPOINTD_CNI_BIN_DIR":                 "/cni/bin",
		"CHECKPOINTD_CNI_CONF_DIR":                "/cni/conf",
		"CHECKPOINTD_STATIC_POD_DIR":              "/kubelet/static",
		"CHECKPOINTD_KUBECONFIG":                  "/kubelet/kubeconfig",
		"CHECKPOINTD_CRI_ENDPOINT":                "unix:///run/crio/crio.sock",
		"CHECKPOINTD_DATA_DIR":                    "/data/stickyip",
		"CHECKPOINTD_CHECKPOINT_DIR":              "/data/checkpoints",
		"CHECKPOINTD_VOLUME_DIR":                  "/run/ckpt",
		"CHECKPOINTD_ALLOW_NAMESPACES":            "kube-system,edge",
		"CHECKPOINTD_ALLOW_PRIVILEGED_NAMESPACES": "edge",
		"CHECKPOINTD_GRACE_PERIOD":                "45s",
		"CHECKPOINTD_LOG_LEVEL":                   "debug",
	}
	got := env(t, ds)
	for k, v := range wantEnv {
		if got[k] != v {
			t.Errorf("env %s=%q, want %q", k, got[k], v)
		}
	}
	mounts := hostPaths(t, ds)
	for _, p := range []string{"/cni/bin", "/kubelet/static", "/kubelet/kubeconfig", "/data/checkpoints", "/run/ckpt"} {
		if mounts[p] == "" {
			t.Errorf("no hostPath mount of %s (mounts %v)", p, mounts)
		}
	}
	if spec.PriorityClassName != "edge-critical" || spec.NodeSelector["edge"] != "true" ||
		len(spec.Tolerations) != 1 || spec.Tolerations[0].Key != "edge" || spec.Tolerations[0].Effect != corev1.TaintEffectNoSchedule {
		t.Errorf("priority %q, node selector %v, tolerations %+v", spec.PriorityClassName, spec.NodeSelector, spec.Tolerations)
	}
	if r := c.Resources; !r.Requests.Cpu().Equal(resource.MustParse("20m")) || !r.Limits.Memory().Equal(resource.MustParse("128Mi")) {
		t.Errorf("resources %+v", r)
	}

	ds, _ = daemonSet(t, render(t, "--set", "uninstall=true"))
	if args := ds.Spec.Template.Spec.Containers[0].Args; !reflect.DeepEqual(args, []string{"uninstall", "--wait"}) {
		t.Errorf("uninstall=true: args %v", args)
	}
	ds, _ = daemonSet(t, render(t, "--set", "checkpointd.staticPod=false"))
	if args := ds.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--static-pod=false") {
		t.Errorf("checkpointd.staticPod=false: args %v", args)
	}
}

// TestControllerValues: the controller's values reach its Deployment (and
// nothing else changes there), the image is the nodes' unless set; without
// placement there is no controller.
func TestControllerValues(t *testing.T) {
	deployment := func(args ...string) *appsv1.Deployment {
		t.Helper()
		var d *appsv1.Deployment
		_, rest := daemonSet(t, render(t, append([]string{"--set", "placement.enabled=true"}, args...)...))
		for _, m := range rest {
			if m["kind"] == "Deployment" {
				j, _ := json.Marshal(m)
				d = &appsv1.Deployment{}
				if err := yaml.UnmarshalStrict(j, d); err != nil {
					t.Fatal(err)
				}
			}
		}
		if d == nil {
			t.Fatalf("%v: no Deployment rendered", args)
		}
		return d
	}
	d := deployment("--set", "image.repository=registry.example/stickyip,image.tag=v9")
	if c := d.Spec.Template.Spec.Containers[0]; c.Image != "registry.example/stickyip:v9" {
		t.Errorf("controller image %s, want the nodes' registry.example/stickyip:v9", c.Image)
	}
	d = deployment("--set", "controller.replicas=3,controller.image=registry.example/ctl:v2",
		"--set-string", "controller.nodeSelector.role=infra",
		"--set", "controller.tolerations[0].key=infra,controller.tolerations[0].operator=Exists",
		"--set", "controller.resources.requests.cpu=1,controller.resources.limits.memory=2Gi")
	spec := d.Spec.Template.Spec
	c := spec.Containers[0]
	if *d.Spec.Replicas != 3 || c.Image != "registry.example/ctl:v2" || spec.NodeSelector["role"] != "infra" ||
		spec.NodeSelector["node-role.kubernetes.io/control-plane"] != "" || len(spec.Tolerations) != 1 || spec.Tolerations[0].Key != "infra" ||
		!c.Resources.Requests.Cpu().Equal(resource.MustParse("1")) || !c.Resources.Limits.Memory().Equal(resource.MustParse("2Gi")) {
		t.Errorf("replicas %d, image %s, node selector %v, tolerations %+v, resources %+v", *d.Spec.Replicas, c.Image, spec.NodeSelector, spec.Tolerations, c.Resources)
	}
	if d.Namespace != "kube-system" || spec.ServiceAccountName != "stickyip-controller" {
		t.Errorf("Deployment in %s with %s: its RBAC names kube-system/stickyip-controller", d.Namespace, spec.ServiceAccountName)
	}
}

// TestK3sValues: values-k3s.yaml puts the plugin, the static pod and
// checkpointd's view of the node on k3s's paths.
func TestK3sValues(t *testing.T) {
	chart := filepath.Join(repoRoot(t), ChartDir)
	ds, _ := daemonSet(t, render(t, "-f", filepath.Join(chart, "values-k3s.yaml")))
	got := env(t, ds)
	for k, v := range map[string]string{
		"CHECKPOINTD_CNI_BIN_DIR":    "/var/lib/rancher/k3s/data/cni",
		"CHECKPOINTD_CNI_CONF_DIR":   "/var/lib/rancher/k3s/agent/etc/cni/net.d",
		"CHECKPOINTD_STATIC_POD_DIR": "/var/lib/rancher/k3s/agent/pod-manifests",
		"CHECKPOINTD_KUBECONFIG":     "/var/lib/rancher/k3s/agent/kubelet.kubeconfig",
		"CHECKPOINTD_CRI_ENDPOINT":   "unix:///run/k3s/containerd/containerd.sock",
	} {
		if got[k] != v {
			t.Errorf("env %s=%q, want %q", k, got[k], v)
		}
	}
	mounts := hostPaths(t, ds)
	for _, p := range []string{"/var/lib/rancher/k3s/data/cni", "/var/lib/rancher/k3s/agent/pod-manifests", "/var/lib/rancher/k3s/agent/kubelet.kubeconfig"} {
		if mounts[p] == "" {
			t.Errorf("no hostPath mount of %s (mounts %v)", p, mounts)
		}
	}
}

// TestValuesRefused: a wrong value fails the rendering (so helm install and
// upgrade) with a message naming it, before anything reaches a cluster.
func TestValuesRefused(t *testing.T) {
	chart := filepath.Join(repoRoot(t), ChartDir)
	for _, tc := range []struct {
		set, want string
	}{
		{"dataDir=var/lib/cni/stickyip", "dataDir"},
		{`node.cniBinDir=/opt/cni/bin"`, "cniBinDir"},
		{"nodeSelector.edge=true", "nodeSelector"}, // a boolean: the API would refuse the DaemonSet
		{"checkpointd.checkpointDir=/var/lib/x y", "checkpointDir"},
		{"checkpointd.env.KUBECONFIG=/root/.kube/config", "env"},
		{"checkpointd.env.NODE_NAME=node1", "env"},
		{"checkpointd.env.bad-key=1", "env"},
		{"checkpointd.allowNamespaces=kube-system; rm", "allowNamespaces"},
		{"image.tag=v1 --privileged", "tag"},
		{"image.pullPolicy=Sometimes", "pullPolicy"},
		{"placement.enabled=yes", "enabled"},
		{"unknownKey=1", "unknownKey"},
		{"maxUnavailable=0", "maxUnavailable"},
		{"controller.replicas=0", "replicas"},
		{"controller.image=stickyip:v1 --privileged", "image"},
		{"controller.nodeSelector.edge=true", "nodeSelector"},
		{"placement.upgradeFromShards=yes", "upgradeFromShards"},
	} {
		_, err := Render(helmBin(t), chart, InstallNamespace, "--set", tc.set)
		if err == nil {
			t.Errorf("--set %s rendered", tc.set)
		} else if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--set %s: the error does not name %s:\n%v", tc.set, tc.want, err)
		}
	}
	_, err := Render(helmBin(t), chart, InstallNamespace, "--set", "placement.enabled=true", "--kube-version", "1.35.0")
	if err == nil || !strings.Contains(err.Error(), "1.36") {
		t.Errorf("placement on Kubernetes 1.35: %v, want a refusal naming 1.36", err)
	}
}

// TestValuesStayValues: what a value holds is never read as YAML: a
// checkpointd setting or a node selector carrying a newline and YAML stays
// one string, and adds nothing to the pod (no hostPID, no extra env).
func TestValuesStayValues(t *testing.T) {
	const evil = "1m\n        - name: CHECKPOINTD_KUBECONFIG\n          value: /root/.kube/config\n      hostPID: true"
	ds, _ := daemonSet(t, render(t, "--set-string", "checkpointd.env.GRACE_PERIOD="+evil, "--set-string", "nodeSelector.zone="+evil))
	spec := ds.Spec.Template.Spec
	got := env(t, ds)
	if got["CHECKPOINTD_GRACE_PERIOD"] != evil || got["CHECKPOINTD_KUBECONFIG"] != "/etc/kubernetes/kubelet.conf" {
		t.Errorf("CHECKPOINTD_GRACE_PERIOD %q, CHECKPOINTD_KUBECONFIG %q", got["CHECKPOINTD_GRACE_PERIOD"], got["CHECKPOINTD_KUBECONFIG"])
	}
	if spec.HostPID || spec.NodeSelector["zone"] != evil {
		t.Errorf("hostPID %v, node selector %q", spec.HostPID, spec.NodeSelector["zone"])
	}
}

// TestStatefulSetsValue: placement.statefulSets, the cluster's default for
// StatefulSet pods, renders deploy/placement as kubectl users get it from
// the kustomize component deploy/placement/cluster-default plus the
// documented patch of the policy's first variable, and nothing else; a
// value the namespace label would not take, or the value without the
// placement policies, is refused.
func TestStatefulSetsValue(t *testing.T) {
	plain := documents(t, render(t, "--set", "placement.enabled=true"))
	set := documents(t, render(t, "--set", "placement.enabled=true,placement.statefulSets=30m-required"))
	if len(plain) != len(set) {
		t.Fatalf("%d objects with the default, %d without", len(set), len(plain))
	}
	type patch struct {
		Target struct{ Kind, Name string }
		Patch  string
	}
	var component struct{ Patches []patch }
	b, err := os.ReadFile(filepath.Join(repoRoot(t), PlacementDir, "cluster-default", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &component); err != nil || len(component.Patches) == 0 {
		t.Fatalf("deploy/placement/cluster-default: %v, %d patches", err, len(component.Patches))
	}
	var literal patch
	literal.Target.Kind, literal.Target.Name = "MutatingAdmissionPolicy", "stickyip-statefulsets"
	literal.Patch = `[{"op": "replace", "path": "/spec/variables/0/expression", "value": "'30m-required'"}]`
	patches := append(component.Patches, literal)
	changed := 0
	for i := range plain {
		md, _ := plain[i]["metadata"].(map[string]any)
		want := []byte(canonical(t, plain[i]))
		for _, p := range patches {
			if p.Target.Kind != plain[i]["kind"] || p.Target.Name != md["name"] {
				continue
			}
			jp, err := jsonpatch.DecodePatch([]byte(p.Patch))
			if err != nil {
				t.Fatalf("the patch of %s %s: %v", p.Target.Kind, p.Target.Name, err)
			}
			if want, err = jp.Apply(want); err != nil {
				t.Fatalf("the patch of %s %s: %v", p.Target.Kind, p.Target.Name, err)
			}
			changed++
		}
		var w map[string]any
		if err := json.Unmarshal(want, &w); err != nil {
			t.Fatal(err)
		}
		if canonical(t, w) != canonical(t, set[i]) {
			t.Errorf("placement.statefulSets renders %v %v as\n%s\nthe component and the patch make\n%s", plain[i]["kind"], md["name"], canonical(t, set[i]), canonical(t, w))
		}
	}
	if changed != 4 {
		t.Errorf("%d patches applied, want 4 (the variable, the opt-in's two bindings, the hint's)", changed)
	}
	chart := filepath.Join(repoRoot(t), ChartDir)
	for _, tc := range []struct{ args []string }{
		{[]string{"--set", "placement.enabled=true,placement.statefulSets=30x"}},
		{[]string{"--set", "placement.enabled=true,placement.statefulSets=30m' || true || '"}},
		{[]string{"--set", "placement.enabled=true", "--set-string", "placement.statefulSets=30m\nx"}},
		{[]string{"--set", "placement.statefulSets=30m"}},
	} {
		if _, err := Render(helmBin(t), chart, InstallNamespace, tc.args...); err == nil || !strings.Contains(err.Error(), "statefulSets") {
			t.Errorf("%v: %v, want a refusal naming statefulSets", tc.args, err)
		}
	}
}
