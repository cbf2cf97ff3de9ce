package policy

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func basePod(ns string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyAlways,
			Containers:    []corev1.Container{{Name: "c", Image: "i"}},
		},
	}
}

func ptr[T any](v T) *T { return &v }

func TestDefaultsAllowOnlyKubeSystemAndNoPower(t *testing.T) {
	p, err := Parse("kube-system", "")
	if err != nil {
		t.Fatal(err)
	}
	if v := p.Evaluate(basePod("kube-system")); !v.Allowed {
		t.Errorf("plain kube-system pod refused: %+v", v)
	}
	v := p.Evaluate(basePod("default"))
	if v.Allowed || v.Reason != ReasonNamespace || !strings.Contains(v.Detail, `"default"`) {
		t.Errorf("default namespace: %+v, want refused naming the namespace", v)
	}
	priv := basePod("kube-system")
	priv.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr(true)}
	v = p.Evaluate(priv)
	if v.Allowed || v.Reason != ReasonPrivileged || !strings.Contains(v.Detail, "privileged") {
		t.Errorf("privileged pod: %+v, want refused as privileged", v)
	}
}

func TestHarmlessSettingsAllowed(t *testing.T) {
	pod := basePod("kube-system")
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr(int64(1000)), FSGroup: ptr(int64(2000)),
		Sysctls:        []corev1.Sysctl{{Name: "net.ipv4.ip_local_port_range", Value: "1024 65000"}},
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	pod.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		ReadOnlyRootFilesystem: ptr(true)}
	pod.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 8080}}
	pod.Spec.Volumes = []corev1.Volume{
		{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s"}}},
		{Name: "e", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
	p, _ := Parse("kube-system", "")
	if v := p.Evaluate(pod); !v.Allowed {
		t.Errorf("pod without node-level power refused: %+v", v)
	}
}

func TestNonRestartingAndAPIBoundPodsRefused(t *testing.T) {
	p, _ := Parse("*", "")
	for _, rp := range []corev1.RestartPolicy{corev1.RestartPolicyNever, corev1.RestartPolicyOnFailure} {
		pod := basePod("jobs")
		pod.Spec.RestartPolicy = rp
		if v := p.Evaluate(pod); v.Allowed || v.Reason != ReasonRestartPolicy {
			t.Errorf("restartPolicy %s: %+v, want refused", rp, v)
		}
	}
	pvc := basePod("db")
	pvc.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "d"}}}}
	if v := p.Evaluate(pvc); v.Allowed || v.Reason != ReasonUnsupported || !strings.Contains(v.Detail, "persistentVolumeClaim") {
		t.Errorf("PVC pod: %+v, want refused as needing the API server", v)
	}
}

func TestParse(t *testing.T) {
	p, err := Parse(" kube-system, infra ,kube-system,", "infra")
	if err != nil || strings.Join(p.Namespaces, ",") != "infra,kube-system" {
		t.Fatalf("Parse: %+v %v", p, err)
	}
	if _, err := Parse("kube-system", "infra"); err == nil || !strings.Contains(err.Error(), "--allow-privileged-namespaces") {
		t.Errorf("privileged namespace outside the allowlist: err %v", err)
	}
	all, err := Parse("*", "*")
	if err != nil || !all.Evaluate(basePod("anything")).Allowed {
		t.Errorf(`"*" does not allow every namespace: %v`, err)
	}
	none, _ := Parse("", "")
	if none.Evaluate(basePod("kube-system")).Allowed {
		t.Error("an empty allowlist allowed a pod")
	}
	// What the start-up log says.
	if got := p.String(); got != "namespaces=infra,kube-system privileged=infra" {
		t.Errorf("String() = %q", got)
	}
	if got := none.String(); got != "namespaces=none privileged=none" {
		t.Errorf("String() of the empty policy = %q", got)
	}
}
