package deploy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

func installObjects(t *testing.T) *appsv1.DaemonSet {
	t.Helper()
	ds, err := Install()
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

func TestInstallManifest(t *testing.T) {
	ds := installObjects(t)
	// An existing namespace: a server dry run of a manifest that also
	// created its namespace refuses every object in it on a cluster that
	// lacks it (kubernetes#83562), and `kubectl delete -f` would delete it.
	if ds.Namespace != metav1.NamespaceSystem {
		t.Errorf("DaemonSet in namespace %q, want %s", ds.Namespace, metav1.NamespaceSystem)
	}
	spec := ds.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(spec.Containers))
	}
	c := spec.Containers[0]
	// The static pod runs the image the installer runs from: the two
	// references must change together on an upgrade.
	if want := "--image=" + c.Image; !contains(c.Args, want) {
		t.Errorf("args %v lack %s: the static pod would run another image than the installer", c.Args, want)
	}
	if c.Args[0] != "install" || !contains(c.Args, "--wait") {
		t.Errorf("args %v, want install --wait", c.Args)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("the installer must run without a service account token")
	}
	if !spec.HostNetwork {
		t.Error("the installer must not need the pod network it installs")
	}
	if len(spec.Tolerations) != 1 || spec.Tolerations[0].Operator != corev1.TolerationOpExists || spec.Tolerations[0].Key != "" {
		t.Errorf("tolerations %+v, want one that tolerates every taint", spec.Tolerations)
	}
	sc := c.SecurityContext
	if sc == nil || sc.Privileged != nil && *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !reflect.DeepEqual(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("securityContext %+v: want unprivileged, no escalation, every capability dropped", sc)
	}
	// Ready only once done: the rollout waits for each node's install (and
	// uninstall) before it moves on. The mark is in the pod's own emptyDir.
	var readyFile string
	for _, e := range c.Env {
		if e.Name == "CHECKPOINTD_READY_FILE" {
			readyFile = e.Value
		}
	}
	if p := c.ReadinessProbe; p == nil || p.Exec == nil || !reflect.DeepEqual(p.Exec.Command, []string{"/checkpointd", "ready"}) || readyFile == "" {
		t.Errorf("readiness probe %+v with CHECKPOINTD_READY_FILE %q: want /checkpointd ready on a ready file", c.ReadinessProbe, readyFile)
	} else if p.TimeoutSeconds < 5 || p.FailureThreshold < 3 {
		// On a loaded node the exec itself took over a second: the default
		// timeout and a single failure made the pod flap and the rollout stall.
		t.Errorf("readiness probe timeoutSeconds %d, failureThreshold %d: want at least 5 and 3, so that a slow exec on a busy node does not make an installed node not ready", p.TimeoutSeconds, p.FailureThreshold)
	}
	mounts := map[string]string{}
	for _, v := range spec.Volumes {
		if v.EmptyDir != nil && v.Name == "status" {
			for _, m := range c.VolumeMounts {
				if m.Name == v.Name && filepath.Dir(readyFile) != m.MountPath {
					t.Errorf("CHECKPOINTD_READY_FILE %s is not in the pod's own %s", readyFile, m.MountPath)
				}
			}
			continue
		}
		if v.HostPath == nil {
			t.Errorf("volume %s is not a hostPath", v.Name)
			continue
		}
		mounts[v.Name] = v.HostPath.Path
	}
	for _, m := range c.VolumeMounts {
		if m.Name != "status" && mounts[m.Name] != m.MountPath {
			t.Errorf("volume %s: host path %s mounted at %s; the static pod names host paths, so they must match", m.Name, mounts[m.Name], m.MountPath)
		}
	}
	for _, p := range []string{"/opt/cni/bin", "/etc/kubernetes/manifests"} {
		if !containsValue(mounts, p) {
			t.Errorf("no hostPath volume for %s", p)
		}
	}
}

// TestFlannelPatch: the kube-flannel patch carries the project's flannel
// conflist (with ipam.newStoreWait NewStoreWait), so what the e2e tier
// tests with conf/ is what operators get.
func TestFlannelPatch(t *testing.T) {
	var patch struct {
		Data map[string]string `json:"data"`
	}
	if err := yaml.UnmarshalStrict(FlannelPatch, &patch); err != nil {
		t.Fatal(err)
	}
	if len(patch.Data) != 1 {
		t.Errorf("patch changes %d keys, want only cni-conf.json (net-conf.json stays)", len(patch.Data))
	}
	requireShippedConflist(t, "the patch's cni-conf.json", patch.Data["cni-conf.json"])
}

// TestFlannelValues: the values for flannel's own chart set its cniConf,
// and nothing else, to the project's flannel conflist.
func TestFlannelValues(t *testing.T) {
	var values struct {
		Flannel map[string]string `json:"flannel"`
	}
	if err := yaml.UnmarshalStrict(FlannelValues, &values); err != nil {
		t.Fatal(err)
	}
	if len(values.Flannel) != 1 {
		t.Errorf("values set %d keys of flannel, want only cniConf (a user's other values stay theirs)", len(values.Flannel))
	}
	requireShippedConflist(t, "flannel.cniConf", values.Flannel["cniConf"])
}

func requireShippedConflist(t *testing.T, what, conf string) {
	t.Helper()
	var got, want any
	if err := json.Unmarshal([]byte(conf), &got); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	shipped, err := os.ReadFile("../conf/10-flannel-stickyip.conflist")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(shipped, &want); err != nil {
		t.Fatal(err)
	}
	want.(map[string]any)["plugins"].([]any)[0].(map[string]any)["ipam"].(map[string]any)["newStoreWait"] = NewStoreWait
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s differs from conf/10-flannel-stickyip.conflist with ipam.newStoreWait %s:\n%s", what, NewStoreWait, conf)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func containsValue(m map[string]string, v string) bool {
	for _, x := range m {
		if x == v || strings.TrimSuffix(x, "/") == v {
			return true
		}
	}
	return false
}
