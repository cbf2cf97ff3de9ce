//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stickyip/stickyip/contract"
)

// The namespace opt-in on the disruption table: the etcd StatefulSet's template carries
// no stickyip annotation; its namespace's opt-in makes it sticky, and the
// same manifest in a namespace without the label is the control.
const (
	etcdOptInLabel       = "10m-required" // what the annotations asked before: 10 minutes, placement required
	etcdUnlabelledNS     = "etcd-unlabelled"
	etcdOptInProbeMember = "etcd-9" // a pod name no member has
)

// optIn labels the app's namespace stickyip.io/statefulsets=value and
// waits until the API server gives a StatefulSet pod created there the
// annotations (the policies are in force, the label seen).
func (a *etcdApp) optIn(value string) {
	c := a.c
	c.labelNamespace(a.ns, value)
	owner, err := c.client.AppsV1().StatefulSets(a.ns).Create(context.Background(), etcdStatefulSet(a.ns, nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		c.t.Fatal(err)
	}
	owner.UID = "00000000-0000-0000-0000-0000000000e7" // a dry run gives none
	eventually(c.t, "the opt-in in force in namespace "+a.ns, time.Minute, 500*time.Millisecond, func() (bool, string) {
		p := stsPod(a.ns, etcdOptInProbeMember, owner, nil)
		got, err := c.client.CoreV1().Pods(a.ns).Create(context.Background(), p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err.Error()
		}
		return got.Annotations[contract.AnnotationDurationFrom] == contract.DurationFromNamespace, fmt.Sprint(got.Annotations)
	})
	c.t.Logf("etcd: namespace %s labelled %s=%s; the StatefulSet's template carries no stickyip annotation", a.ns, contract.LabelStatefulSets, value)
}

// unlabelled is the opt-in's control, run once the sticky table is done:
// the same StatefulSet (no annotation) in a namespace without the label,
// on the same stickyip nodes, founded, then its first row (a member
// deleted) asserted as on host-local: the member back at another IP, and
// no pod of it marked by the opt-in.
func (a *etcdApp) unlabelled() {
	c := a.c
	start := time.Now()
	b := &etcdApp{c: c, ns: etcdUnlabelledNS, client: a.client}
	c.ensureNamespace(b.ns)
	b.found()
	row := b.row(etcdDisruptions[0])
	pods, err := c.client.CoreV1().Pods(b.ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + etcdName})
	if err != nil {
		c.t.Fatal(err)
	}
	for _, p := range pods.Items {
		if marked(p) {
			c.t.Errorf("etcd in %s (no label): pod %s carries %v", b.ns, p.Name, p.Annotations)
		}
	}
	c.t.Logf("etcd in %s (the same manifest, no label, stickyip nodes): %s", b.ns, row)
	b.remove()
	c.kubectl("delete", "namespace", b.ns, "--wait=true", "--timeout=2m")
	c.t.Logf("etcd: the opt-in's control took %s", time.Since(start).Round(100*time.Millisecond))
}

// marked reports whether p carries a reservation or the opt-in's mark.
func marked(p corev1.Pod) bool {
	_, d := p.Annotations[contract.AnnotationReservedDuration]
	_, f := p.Annotations[contract.AnnotationDurationFrom]
	return d || f
}
