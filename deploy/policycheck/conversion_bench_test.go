package policycheck

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// BenchmarkShardConversion is where a pod's creation goes on kube-apiserver
// 1.36 in a namespace with placement shards, sticky pod or plain (issue 47:
// plain pods +2.9 to +3.7 ms, timed another way). The hint's binding
// selects the namespace's shards as parameters, up to 8, and 1.36 evaluates
// the policy once per shard: each evaluation first builds its CEL
// activation, converting the pod (object), the shard (params), the
// admission request and the namespace to unstructured with
// runtime.DefaultUnstructuredConverter (k8s.io/apiserver v0.36.3,
// plugin/cel/activation.go newActivation, called by the match conditions'
// matcher), and only then evaluates the match condition, which stops a
// plain pod at its first test. 1.37 hands typed values to CEL lazily. Each
// sub-benchmark is one such conversion: a pod's creation pays its own and
// each shard's for each shard (and again for the mutation of the one that
// matches). A shard's cost follows its nodes (one key and one
// ownerReference each), not its entries (strings are not copied). The
// managedFields variants are what a shard would cost with the managedFields
// every node's write left before issue 47; the API server's informers drop
// managedFields (kubernetes/pkg/controlplane/apiserver/config.go: trim), so
// the parameters 1.36 converts are the "none" ones either way.
//
//	cd deploy/policycheck && go test -run '^$' -bench ShardConversion -count 3
func BenchmarkShardConversion(b *testing.B) {
	const nodes = 100
	for _, inNamespace := range []int{1000, 10000, 30000} {
		for _, fields := range []bool{true, false} {
			cm := benchShard(inNamespace/8, nodes, fields)
			name := fmt.Sprintf("shard-%d-%s", inNamespace, map[bool]string{true: "managedFields", false: "none"}[fields])
			b.Run(name, func(b *testing.B) {
				for b.Loop() {
					if _, err := runtime.DefaultUnstructuredConverter.ToUnstructured(cm); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(jsonSize(b, cm)), "bytes")
			})
		}
	}
	for name, obj := range map[string]any{"pod": benchPod(), "namespace": benchNamespace()} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if _, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchShard is a shard of lines identities over nodes, each node's key
// and reference, as nodes write it; with fields, the managedFields the
// nodes' field manager left on it before issue 47.
func benchShard(lines, nodes int, fields bool) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "stickyip-index-0", Namespace: "bench", ResourceVersion: "123456",
		Labels: map[string]string{"stickyip.io/index": "0"}}, Data: map[string]string{}}
	values := make([]string, nodes)
	for i := range lines {
		id := fmt.Sprintf("identity:db-%d", i)
		n := i % nodes
		values[n] += fmt.Sprintf("%s db-%d-x 1 2026-11-25T00:00:00.000Z - 10.100.%d.%d\n", id, i, i/250, i%250+1)
	}
	data, refs := map[string]any{}, map[string]any{".": map[string]any{}}
	for n, v := range values {
		node := fmt.Sprintf("bnode-%02d", n)
		uid := types.UID(fmt.Sprintf("%08d-0000-4000-8000-000000000000", n))
		cm.Data[node] = strings.TrimSuffix(v, "\n")
		cm.OwnerReferences = append(cm.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: node, UID: uid})
		data["f:"+node] = map[string]any{}
		refs[fmt.Sprintf(`k:{"uid":"%s"}`, uid)] = map[string]any{".": map[string]any{}, "f:apiVersion": map[string]any{},
			"f:kind": map[string]any{}, "f:name": map[string]any{}, "f:uid": map[string]any{}}
	}
	if fields {
		raw, _ := json.Marshal(map[string]any{"f:data": data, "f:metadata": map[string]any{
			"f:labels": map[string]any{".": map[string]any{}, "f:stickyip.io/index": map[string]any{}}, "f:ownerReferences": refs}})
		now := metav1.Now()
		cm.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "stickyip-placement", Operation: metav1.ManagedFieldsOperationUpdate,
			APIVersion: "v1", Time: &now, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: raw}}}
	}
	return cm
}

// benchPod is a plain pod as a client creates it, with the managedFields
// entry the API server gives it before admission.
func benchPod() *corev1.Pod {
	raw := []byte(`{"f:metadata":{"f:labels":{".":{},"f:app":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"c\"}":{".":{},"f:image":{},` +
		`"f:imagePullPolicy":{},"f:name":{},"f:resources":{},"f:terminationMessagePath":{},"f:terminationMessagePolicy":{}}},` +
		`"f:dnsPolicy":{},"f:enableServiceLinks":{},"f:restartPolicy":{},"f:schedulerName":{},"f:securityContext":{},` +
		`"f:terminationGracePeriodSeconds":{}}}`)
	now := metav1.Now()
	grace := int64(30)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-6d4cf56db6-x7k2p", Namespace: "bench", Labels: map[string]string{"app": "web"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
				Time: &now, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: raw}}}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/web:1", ImagePullPolicy: corev1.PullIfNotPresent,
			TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: corev1.TerminationMessageReadFile}},
			RestartPolicy: corev1.RestartPolicyAlways, TerminationGracePeriodSeconds: &grace, DNSPolicy: corev1.DNSClusterFirst,
			SchedulerName: "default-scheduler", SecurityContext: &corev1.PodSecurityContext{}},
	}
}

// benchNamespace is a namespace as the API server keeps it.
func benchNamespace() *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench", Labels: map[string]string{"kubernetes.io/metadata.name": "bench"}},
		Spec: corev1.NamespaceSpec{Finalizers: []corev1.FinalizerName{corev1.FinalizerKubernetes}}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive}}
}

func jsonSize(b *testing.B, v any) int {
	raw, err := json.Marshal(v)
	if err != nil {
		b.Fatal(err)
	}
	return len(raw)
}
