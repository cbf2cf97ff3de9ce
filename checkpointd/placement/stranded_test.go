package placement

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/stickyip/stickyip/checkpointd/kube"
	"github.com/stickyip/stickyip/checkpointd/kube/kubetest"
)

// A pod required onto a node that no longer exists is named; one whose
// node is there, one only preferring a gone node, and one already bound are
// not.
func TestFindStranded(t *testing.T) {
	pod := func(name, placement, bound string, phase corev1.PodPhase, terms ...[]string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "db", Annotations: map[string]string{}},
			Spec: corev1.PodSpec{NodeName: bound}, Status: corev1.PodStatus{Phase: phase}}
		if placement != "" {
			p.Annotations["stickyip.io/placement"] = placement
		}
		var sel corev1.NodeSelector
		for _, nodes := range terms {
			sel.NodeSelectorTerms = append(sel.NodeSelectorTerms, corev1.NodeSelectorTerm{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/os", Operator: corev1.NodeSelectorOpIn, Values: []string{"linux"}}},
				MatchFields:      []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: nodes}}})
		}
		if len(terms) > 0 {
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &sel}}
		}
		return p
	}
	objs := []runtime.Object{
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1"}},
		pod("waits-for-gone", "required", "", corev1.PodPending, []string{"node2"}, []string{"node2"}),
		pod("waits-for-node1", "required", "", corev1.PodPending, []string{"node1"}),
		pod("preferred", "preferred", "", corev1.PodPending, []string{"node2"}),
		pod("bound", "required", "node1", corev1.PodRunning, []string{"node1"}),
		pod("no-affinity", "required", "", corev1.PodPending),
	}
	c, err := kube.NewREST(kubetest.New(t, objs...).Config())
	if err != nil {
		t.Fatal(err)
	}
	got, err := FindStranded(context.Background(), c)
	if err != nil || len(got) != 1 || got[0].Name != "waits-for-gone" || fmt.Sprint(got[0].Nodes) != "[node2]" {
		t.Fatalf("FindStranded: %+v, %v; want waits-for-gone, node2", got, err)
	}
}
