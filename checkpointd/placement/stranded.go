package placement

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stickyip/stickyip/checkpointd/kube"
	"github.com/stickyip/stickyip/contract"
)

// Stranded is a pod that waits for a node that no longer exists: Pending,
// annotated contract.PlacementRequired, and required by its node affinity
// onto nodes of which none is registered (the hint named the node that held
// the pod's IP, whose Node was deleted since).
type Stranded struct {
	Namespace, Name string
	Nodes           []string  // the nodes its required node affinity names
	Created         time.Time // the pod's creation
}

// FindStranded lists the stranded pods of the cluster (pods of every
// namespace and Nodes are read: an administrator's credentials).
func FindStranded(ctx context.Context, c *kube.REST) ([]Stranded, error) {
	var nodes corev1.NodeList
	if err := c.List(ctx, kube.Nodes, "", metav1.ListOptions{}, &nodes); err != nil {
		return nil, fmt.Errorf("list Nodes: %w", err)
	}
	registered := map[string]bool{}
	for _, n := range nodes.Items {
		registered[n.Name] = true
	}
	var pods corev1.PodList
	if err := c.List(ctx, kube.Pods, "", metav1.ListOptions{FieldSelector: "status.phase=Pending,spec.nodeName="}, &pods); err != nil {
		return nil, fmt.Errorf("list Pending pods: %w", err)
	}
	var out []Stranded
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodPending || p.Spec.NodeName != "" || p.Annotations[contract.AnnotationPlacement] != contract.PlacementRequired {
			continue
		}
		names := requiredNodeNames(&p)
		if len(names) == 0 || slices.ContainsFunc(names, func(n string) bool { return registered[n] }) {
			continue
		}
		out = append(out, Stranded{Namespace: p.Namespace, Name: p.Name, Nodes: names, Created: p.CreationTimestamp.Time})
	}
	return out, nil
}

// requiredNodeNames returns the node names a pod's required node affinity
// names with metadata.name In, each once.
func requiredNodeNames(p *corev1.Pod) []string {
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return nil
	}
	var out []string
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, f := range term.MatchFields {
			if f.Key == "metadata.name" && f.Operator == corev1.NodeSelectorOpIn {
				out = append(out, f.Values...)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
