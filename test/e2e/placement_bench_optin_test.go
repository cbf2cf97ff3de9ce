//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/stickyip/stickyip/contract"
)

// The namespace opt-in's cells of the placement benchmark: StatefulSet
// pods without stickyip annotations of their own, in the measured
// namespace labelled with the opt-in (each gets its duration from the label
// and the hint for its identity's node) and unlabelled (nothing). Their
// identities are the held pods' (stickyip.io/identity, no duration): the
// same lookup. The opt-in's two bindings are in place and removed with the
// hint's, so "policies off" is a cluster without stickyip's pod mutations
// for every kind.
const (
	benchOptInMarked   = "statefulset, namespace default" // held through the opt-in
	benchOptInUnmarked = "statefulset, unlabelled namespace"
	// Held and plain pods of the unlabelled namespace, measured in one loop
	// with the opt-in's bindings in place, then in the same loop with them
	// removed (the hint's in place): what the opt-in costs the pods of
	// other namespaces.
	benchOptInBound   = "opt-in bound: "
	benchOptInUnbound = "opt-in unbound: "
	benchOptInLabel   = "10m"
	benchOptInProbe   = "bench-optin" // a namespace labelled for good: where setOptIn sees the binding
)

// benchOptIn is the opt-in's state in the benchmark.
type benchOptIn struct {
	bindings []*admissionv1.MutatingAdmissionPolicyBinding
}

// setOptIn puts the opt-in's bindings in place or removes them, as
// setPolicy does the hint's, and waits until the API server acts
// accordingly: a pod of a labelled namespace carrying the opt-in's mark,
// which it did not set, loses it.
func (pb *placementBench) setOptIn(ctx context.Context, on bool) {
	b := pb.b
	bindings := pb.cs.AdmissionregistrationV1().MutatingAdmissionPolicyBindings()
	if pb.optIn.bindings == nil {
		for _, name := range []string{optInPolicy, optInPolicy + "-shards"} {
			cur, err := bindings.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				b.Fatal(err)
			}
			pb.optIn.bindings = append(pb.optIn.bindings, cur)
		}
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchOptInProbe, Labels: map[string]string{contract.LabelStatefulSets: benchOptInLabel}}}
		if _, err := pb.cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
		if _, err := pb.cs.CoreV1().ServiceAccounts(benchOptInProbe).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			b.Fatal(err)
		}
	}
	for _, binding := range pb.optIn.bindings {
		if on {
			nb := binding.DeepCopy()
			nb.ResourceVersion, nb.UID = "", ""
			if _, err := bindings.Create(ctx, nb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				b.Fatal(err)
			}
		} else if err := bindings.Delete(ctx, binding.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			b.Fatal(err)
		}
	}
	eventually(b, fmt.Sprintf("the opt-in %s", map[bool]string{true: "on", false: "off"}[on]), time.Minute, 200*time.Millisecond, func() (bool, string) {
		p := pb.pod(benchSpace{name: benchOptInProbe}, "plain", "", true)
		p.Annotations = map[string]string{contract.AnnotationDurationFrom: contract.DurationFromNamespace}
		got, err := pb.cs.CoreV1().Pods(benchOptInProbe).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err.Error()
		}
		_, marked := got.Annotations[contract.AnnotationDurationFrom]
		return marked != on, fmt.Sprint(got.Annotations)
	})
}

// label sets or removes the opt-in label of namespace s; with the policies
// on, it waits until a StatefulSet pod there is admitted accordingly (with
// n identities held: its hint too).
func (pb *placementBench) label(ctx context.Context, s benchSpace, marked, on bool, n int) {
	b := pb.b
	value := "null"
	if marked {
		value = fmt.Sprintf("%q", benchOptInLabel)
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, contract.LabelStatefulSets, value)
	if _, err := pb.cs.CoreV1().Namespaces().Patch(ctx, s.name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		b.Fatal(err)
	}
	if !on {
		return
	}
	eventually(b, fmt.Sprintf("namespace %s labelled %v", s.name, marked), time.Minute, 200*time.Millisecond, func() (bool, string) {
		got, err := pb.cs.CoreV1().Pods(s.name).Create(ctx, pb.optInPod(s, s.key(0, false), true), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err.Error()
		}
		hinted := n == 0 || !marked || hasOnly(got, benchNode(holderOf(0)), false)
		return (got.Annotations[contract.AnnotationReservedDuration] == benchOptInLabel) == marked && hinted, fmt.Sprint(got.Annotations, got.Spec.Affinity)
	})
}

// optInPod is a StatefulSet's pod of s for stickyip.io/identity key,
// without a duration of its own, unbound.
func (pb *placementBench) optInPod(s benchSpace, key string, dryRun bool) *corev1.Pod {
	p := pb.pod(s, "plain", key, dryRun)
	p.Annotations = map[string]string{annIdentity: key}
	yes := true
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: "00000000-0000-0000-0000-0000000000db",
		Controller: &yes}}
	return p
}

// measureOptIn creates benchPods StatefulSet pods in s unlabelled, then as
// many labelled, then held and plain pods with the opt-in's bindings
// removed, adding the time each creation took to got; with the policies
// on and n identities held, each labelled one must carry the label's
// duration and exactly the preferred term of its identity's node, each
// unlabelled one nothing, each held one its term (counted in wrong
// otherwise).
func (pb *placementBench) measureOptIn(ctx context.Context, s benchSpace, n int, on bool, got map[string][]time.Duration, wrong *int) {
	b := pb.b
	pods := pb.cs.CoreV1().Pods(s.name)
	create := func(kind string, p *corev1.Pod) *corev1.Pod {
		start := time.Now()
		created, err := pods.Create(ctx, p, metav1.CreateOptions{})
		d := time.Since(start)
		if err != nil {
			b.Fatalf("create %s/%s: %v", s.name, p.Name, err)
		}
		got[cellKey(s, kind)] = append(got[cellKey(s, kind)], d)
		return created
	}
	for _, marked := range []bool{false, true} {
		pb.label(ctx, s, marked, on, n)
		kind := map[bool]string{true: benchOptInMarked, false: benchOptInUnmarked}[marked]
		for i := range benchPods {
			k := (i*7919 + pb.serial) % max(n, 1)
			created := create(kind, pb.optInPod(s, s.key(k, false), false))
			if !on || n == 0 {
				continue
			}
			ok := created.Annotations[contract.AnnotationReservedDuration] == "" && created.Spec.Affinity == nil
			if marked {
				ok = created.Annotations[contract.AnnotationReservedDuration] == benchOptInLabel && hasOnly(created, benchNode(holderOf(k)), false)
			}
			if !ok {
				*wrong++
				b.Logf("%s pod %s/%s (identity %d): annotations %v, affinity %v", kind, s.name, created.Name, k, created.Annotations, created.Spec.Affinity)
			}
		}
	}
	pb.label(ctx, s, false, on, n)
	// Today's kinds with the opt-in's bindings, then without (with the
	// policies off they are removed already).
	for _, prefix := range []string{benchOptInBound, benchOptInUnbound} {
		if on && prefix == benchOptInUnbound {
			pb.setOptIn(ctx, false)
		}
		for i := range benchPods {
			for _, kind := range []string{"held", "plain"} {
				if kind == "held" && n == 0 {
					continue
				}
				k := (i*7919 + pb.serial) % max(n, 1)
				created := create(prefix+kind, pb.pod(s, kind, s.key(k, false), false))
				if on && kind == "held" && !hasOnly(created, benchNode(holderOf(k)), false) {
					*wrong++
					b.Logf("%s pod %s/%s (identity %d): affinity %v", prefix+kind, s.name, created.Name, k, created.Spec.Affinity)
				}
			}
		}
	}
	if on {
		pb.setOptIn(ctx, true)
	}
	pb.deletePods(ctx, s.name)
}
