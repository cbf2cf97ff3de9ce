package deploy

import (
	"reflect"
	"slices"
	"strconv"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// stickyip-controller's Deployment: two replicas where cluster controllers
// run (control-plane nodes, their taint tolerated), apart when they can be,
// critical, unprivileged, with a read-only root, its probes and metrics on
// ControllerListen, resources set, the image the nodes run, and its own
// ServiceAccount.
func TestControllerDeployment(t *testing.T) {
	d := doc[*appsv1.Deployment](t, placementDocs(t), "Deployment/"+ControllerName)
	spec := d.Spec.Template.Spec
	if d.Namespace != ControllerNamespace || d.Spec.Replicas == nil || *d.Spec.Replicas != 2 || spec.ServiceAccountName != ControllerName {
		t.Errorf("Deployment %s/%s, replicas %v, service account %s; want %s, 2, %s", d.Namespace, d.Name, d.Spec.Replicas, spec.ServiceAccountName, ControllerNamespace, ControllerName)
	}
	const cp = "node-role.kubernetes.io/control-plane"
	if v, ok := spec.NodeSelector[cp]; !ok || v != "" || len(spec.NodeSelector) != 1 ||
		!slices.ContainsFunc(spec.Tolerations, func(t corev1.Toleration) bool {
			return t.Key == cp && t.Operator == corev1.TolerationOpExists && t.Effect == corev1.TaintEffectNoSchedule
		}) {
		t.Errorf("node selector %v, tolerations %+v; want the control-plane nodes, their NoSchedule taint tolerated", spec.NodeSelector, spec.Tolerations)
	}
	if a := spec.Affinity; a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 0 ||
		len(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 ||
		a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.TopologyKey != "kubernetes.io/hostname" ||
		!reflect.DeepEqual(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.LabelSelector.MatchLabels, d.Spec.Selector.MatchLabels) {
		t.Errorf("affinity %+v; want the replicas preferably on different nodes", spec.Affinity)
	}
	if spec.PriorityClassName != "system-cluster-critical" {
		t.Errorf("priority class %q", spec.PriorityClassName)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers", len(spec.Containers))
	}
	c := spec.Containers[0]
	psc, sc := spec.SecurityContext, c.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 ||
		sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
		t.Errorf("security contexts %+v, %+v: want non-root, a read-only root filesystem, no escalation, no capability", psc, sc)
	}
	if !slices.Equal(c.Command, []string{"/" + ControllerName}) || !slices.Contains(c.Args, "--listen-address="+ControllerListen) {
		t.Errorf("command %v, args %v", c.Command, c.Args)
	}
	if len(c.Ports) != 1 || ":"+itoa(c.Ports[0].ContainerPort) != ControllerListen {
		t.Fatalf("ports %+v, want %s", c.Ports, ControllerListen)
	}
	for _, p := range []struct {
		probe *corev1.Probe
		path  string
	}{{c.ReadinessProbe, "/readyz"}, {c.LivenessProbe, "/healthz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.String() != c.Ports[0].Name {
			t.Errorf("probe %+v, want GET %s on %s", p.probe, p.path, c.Ports[0].Name)
		}
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v: want requests and a memory limit", c.Resources)
	}
	if ds := installObjects(t); c.Image != ds.Spec.Template.Spec.Containers[0].Image || c.ImagePullPolicy != ds.Spec.Template.Spec.Containers[0].ImagePullPolicy {
		t.Errorf("image %s (%s), the nodes' %s (%s): one image, one tag to change", c.Image, c.ImagePullPolicy, ds.Spec.Template.Spec.Containers[0].Image, ds.Spec.Template.Spec.Containers[0].ImagePullPolicy)
	}
}

func itoa(i int32) string { return strconv.Itoa(int(i)) }
