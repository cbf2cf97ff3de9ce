package policycheck

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/admission"

	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/contract/placementv1"
)

var update = flag.Bool("update", false, "write testdata/ from cases_test.go")

// The cases both modules run (testdata/cases.json) and the large inputs
// they read (testdata/*.json.gz), made here with the contract's names and
// bounds. TestCasesAreCurrent fails when testdata/ is not what this file
// makes: go test -run TestCasesAreCurrent -update writes it.

const (
	ns        = "db"
	shard0    = "stickyip-placement-names-0" // placementv1.ShardName(placementv1.Names, 0)
	shard1    = "stickyip-placement-names-1"
	keyed0    = "stickyip-placement-keyed-0"
	holder    = "node-a"
	otherNode = "node-b"
	// maxAnnotations is the API server's bound on a pod's annotations, keys
	// and values together (apimachinery TotalAnnotationSizeLimitB).
	maxAnnotations = 256 << 10
)

var (
	nodesGroup = []string{"system:nodes", "system:authenticated"}
	admin      = who("kubernetes-admin", "system:masters", "system:authenticated")
	stsCtl     = who("system:serviceaccount:kube-system:statefulset-controller", "system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated")
	controller = who("system:serviceaccount:kube-system:stickyip-controller", "system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated")
	since      = metav1.NewTime(time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC))
)

type userInfo = struct {
	Name   string
	Groups []string
}

func who(name string, groups ...string) userInfo { return userInfo{name, groups} }

func nodeUser(name string) userInfo { return who("system:node:"+name, nodesGroup...) }

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func namespace(labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}
}

// shard is the shard name of ns, as the controller writes it: keys (of
// the shard's series) to nodes.
func shard(name string, keys map[string]string) *corev1.ConfigMap {
	series, _, ok := placementv1.ParseShardName(name)
	if !ok {
		panic("no shard's name: " + name)
	}
	return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, ResourceVersion: "1234", Labels: map[string]string{placementv1.IndexLabel: series}},
		Data:       keys}
}

// index is the three shards of the behaviour cases: db-0 and web-1 in the
// first of the names, db-1 in the second, the keyed identity cache in the
// first keyed one.
func index() []json.RawMessage {
	return []json.RawMessage{
		mustJSON(shard(shard0, map[string]string{"db-0": holder, "web-1": otherNode})),
		mustJSON(shard(shard1, map[string]string{"db-1": otherNode})),
		mustJSON(shard(keyed0, map[string]string{"cache": holder})),
	}
}

// pod is a pod of ns as its creator sends it: not bound, a container, the
// annotations given; a StatefulSet's when sts.
func pod(name string, annotations map[string]string, sts bool) *corev1.Pod {
	p := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: annotations},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "db"}}}}
	if sts {
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: "3c1e4bbf-0b55-4d7b-9d2a-6f8b9a1c2d3e", Controller: &yes}}
	}
	return p
}

func reserves(extra ...string) map[string]string {
	a := map[string]string{contract.AnnotationReservedDuration: "30"}
	for i := 0; i+1 < len(extra); i += 2 {
		a[extra[i]] = extra[i+1]
	}
	return a
}

func term(key string) corev1.NodeSelectorTerm {
	return corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: corev1.NodeSelectorOpExists}}}
}

// hintField is the requirement the hint adds for node.
func hintField(node string) corev1.NodeSelectorRequirement {
	return corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}
}

func preferred(node string) corev1.PreferredSchedulingTerm {
	return corev1.PreferredSchedulingTerm{Weight: 100, Preference: corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{hintField(node)}}}
}

// hintCase is a pod's creation by the StatefulSet controller in ns, with
// the index's shards as parameters.
func hintCase(name string, p *corev1.Pod, ns *corev1.Namespace, want Want) Case {
	c := Case{Name: name, Operation: admission.Create, Resource: "pods", Object: mustJSON(p), Namespace: ns, Params: index(), Want: want}
	c.User = stsCtl
	if want.Affinity == nil {
		want.Affinity = mustJSON(p.Spec.Affinity)
		c.Want = want
	}
	return c
}

// record is node's NodeRecord with one entry.
func record(node string, mutate func(*placementv1.NodeRecord)) json.RawMessage {
	r := &placementv1.NodeRecord{TypeMeta: metav1.TypeMeta{APIVersion: placementv1.SchemeGroupVersion.String(), Kind: placementv1.NodeRecordKind},
		ObjectMeta: metav1.ObjectMeta{Name: node},
		Spec: placementv1.NodeRecordSpec{NodeUID: "0f5d8f2e-6a71-4c4b-8f1e-2b9d7c3a4e51", Entries: []placementv1.Entry{{
			Namespace: ns, Identity: "db-0", Pod: "db-0", PodUID: "7b0d2c61-3f4e-4a5b-9c8d-1e2f3a4b5c6d", Since: since, Addresses: []string{"10.244.1.5"}}}}}
	if mutate != nil {
		mutate(r)
	}
	return mustJSON(r)
}

func recordCase(name string, op admission.Operation, u userInfo, obj, old json.RawMessage, denied ...string) Case {
	c := Case{Name: name, Operation: op, Resource: "noderecords", User: u, Object: obj, OldObject: old,
		Want: Want{Invoked: []string{"stickyip-node-records/stickyip-node-records"}}}
	for _, d := range denied {
		c.Want.Denied = append(c.Want.Denied, "ValidatingAdmissionPolicy 'stickyip-node-records' with binding 'stickyip-node-records' denied request: "+d)
	}
	return c
}

// statusCase is a pods/status update of a pod bound to holder, from the
// pod's annotations before to after, by u.
func statusCase(name string, u userInfo, before, after map[string]string, invoked bool, denied ...string) Case {
	old, obj := pod("db-0", before, true), pod("db-0", after, true)
	old.Spec.NodeName, obj.Spec.NodeName = holder, holder
	obj.Status.Phase = corev1.PodRunning
	c := Case{Name: name, Operation: admission.Update, Resource: "pods/status", User: u, Object: mustJSON(obj), OldObject: mustJSON(old), Namespace: namespace(nil)}
	if invoked {
		c.Want.Invoked = []string{"stickyip-pod-identity/stickyip-pod-identity"}
	}
	for _, d := range denied {
		c.Want.Denied = append(c.Want.Denied, "ValidatingAdmissionPolicy 'stickyip-pod-identity' with binding 'stickyip-pod-identity' denied request: "+d)
	}
	return c
}

const (
	hint      = "stickyip-placement/stickyip-placement-shards/"
	optIn     = "stickyip-statefulsets/stickyip-statefulsets"
	optInHint = "stickyip-statefulsets/stickyip-statefulsets-shards/"
	podPolicy = "stickyip-placement-pods/stickyip-placement-pods"
	labelPol  = "stickyip-statefulsets-label/stickyip-statefulsets-label"
)

func behaviourCases() []Case {
	plain := namespace(nil)
	var cs []Case

	// The hint.
	p := pod("db-0", reserves(), true)
	p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 5, Preference: term("zone")}}}}
	cs = append(cs, hintCase("hint: a held pod name, preferred, after the pod's own preferred term", p, plain, Want{Invoked: []string{hint + shard0},
		Affinity: mustJSON(&corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{
			{Weight: 5, Preference: term("zone")}, preferred(holder)}}})}))
	p = pod("cache-7f9c-x2x", reserves(contract.AnnotationIdentity, "cache", contract.AnnotationPlacement, contract.PlacementPreferred), false)
	cs = append(cs, hintCase("hint: a held keyed identity, preferred, no affinity of its own", p, plain, Want{Invoked: []string{hint + keyed0, podPolicy},
		Affinity: mustJSON(&corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{preferred(holder)}}})}))
	p = pod("db-0", reserves(contract.AnnotationPlacement, contract.PlacementRequired), true)
	withFields := term("disk")
	withFields.MatchFields = []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"node-z"}}}
	p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{term("zone"), withFields}}}}
	want0, want1 := term("zone"), term("disk")
	want0.MatchFields = []corev1.NodeSelectorRequirement{hintField(holder)}
	want1.MatchFields = append(slicesClone(withFields.MatchFields), hintField(holder))
	cs = append(cs, hintCase("hint: required, ANDed into each of the pod's own terms", p, plain, Want{Invoked: []string{hint + shard0, podPolicy},
		Affinity: mustJSON(&corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{want0, want1}}}})}))
	p = pod("db-0", reserves(contract.AnnotationPlacement, contract.PlacementRequired), true)
	p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 5, Preference: term("zone")}}}}
	cs = append(cs, hintCase("hint: required, the pod has no required terms of its own", p, plain, Want{Invoked: []string{hint + shard0, podPolicy},
		Affinity: mustJSON(&corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution:  &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{hintField(holder)}}}},
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 5, Preference: term("zone")}}}})}))
	p = pod("db-1", reserves(), true)
	cs = append(cs, hintCase("hint: the identity in the second shard: only that shard's invocation goes past its match condition", p, plain, Want{Invoked: []string{hint + shard1},
		Affinity: mustJSON(&corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{preferred(otherNode)}}})}))
	for _, c := range []struct {
		name string
		pod  *corev1.Pod
	}{
		{"hint: nothing for a plain pod", pod("db-0", nil, true)},
		{"hint: nothing for a 0 duration", pod("db-0", reserves(contract.AnnotationReservedDuration, "0"), true)},
		{"hint: nothing for a 0m0s duration", pod("db-0", reserves(contract.AnnotationReservedDuration, "0m0s"), true)},
		{"hint: nothing for a duration longer than the plugin takes", pod("db-0", reserves(contract.AnnotationReservedDuration, strings.Repeat("0", contract.MaxAnnotationValueLen)+"1"), true)},
		{"hint: nothing for an identity the index does not hold", pod("db-2", reserves(), true)},
		{"hint: nothing for a keyed identity the index does not hold, though it holds the pod's name", pod("db-0", reserves(contract.AnnotationIdentity, "db-0"), true)},
		{"hint: nothing for an empty keyed identity", pod("db-0", reserves(contract.AnnotationIdentity, ""), true)},
		{"hint: nothing for a pod named as a held keyed identity's key", pod("cache", reserves(), false)},
	} {
		cs = append(cs, hintCase(c.name, c.pod, plain, Want{}))
	}
	p = pod("db-0", reserves(), true)
	p.Spec.NodeName = otherNode
	cs = append(cs, hintCase("hint: nothing for a pod bound at creation", p, plain, Want{}))
	c := hintCase("hint: nothing in a namespace without shards", pod("db-0", reserves(), true), plain, Want{})
	c.Params = nil
	cs = append(cs, c)

	// The keepers of ConfigMap parameters match only a resource no API
	// server serves; there they take every shard and change nothing.
	keepers := Case{Name: "keepers: a request no API server serves reaches them, with every shard, and nothing changes", Operation: admission.Create,
		Resource: "noresources", User: admin, Namespace: plain, Params: index(),
		Object: mustJSON(map[string]any{"apiVersion": "stickyip.io/v1", "kind": "NoResource", "metadata": map[string]any{"name": "x", "namespace": ns}})}
	for range 2 { // the mutating keeper, then the validating one
		for _, s := range []string{shard0, shard1, keyed0} {
			keepers.Want.Invoked = append(keepers.Want.Invoked, "stickyip-index-params/stickyip-index-params/"+s)
		}
	}
	cs = append(cs, keepers)

	// The namespace opt-in: its own hint binding, not the hint's.
	labelled := namespace(map[string]string{contract.LabelStatefulSets: "30m-required"})
	cs = append(cs, hintCase("opt-in: a StatefulSet pod of a labelled namespace gets the duration and the required hint", pod("db-0", nil, true), labelled, Want{
		Invoked:     []string{optInHint + shard0, optIn, podPolicy}, // in the order deploy/placement applies them; the placement it adds is checked
		Annotations: map[string]string{contract.AnnotationReservedDuration: "30m", contract.AnnotationDurationFrom: contract.DurationFromNamespace, contract.AnnotationPlacement: contract.PlacementRequired},
		Affinity: mustJSON(&corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{hintField(holder)}}}}}})}))
	cs = append(cs, hintCase("opt-in: a pod's own annotations win, the hint is the opt-in's", pod("db-0", reserves(), true), labelled, Want{
		Invoked:     []string{optInHint + shard0},
		Annotations: reserves(),
		Affinity:    mustJSON(&corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{preferred(holder)}}})}))

	// The placement annotation's value, the namespace label's.
	cs = append(cs, hintCase("pods: a placement that is neither required nor preferred is refused", pod("db-2", reserves(contract.AnnotationPlacement, "requird"), true), plain, Want{
		Invoked: []string{podPolicy}, Denied: []string{"ValidatingAdmissionPolicy 'stickyip-placement-pods' with binding 'stickyip-placement-pods' denied request: stickyip.io/placement: \"requird\""}}))
	bad := namespace(map[string]string{contract.LabelStatefulSets: "30x"})
	cs = append(cs, Case{Name: "label: a namespace's opt-in label that does not read is refused", Operation: admission.Create, Resource: "namespaces", User: admin,
		Object: mustJSON(bad), Want: Want{Invoked: []string{labelPol}, Denied: []string{"ValidatingAdmissionPolicy 'stickyip-statefulsets-label' with binding 'stickyip-statefulsets-label' denied request: stickyip.io/statefulsets: \"30x\""}}})
	cs = append(cs, Case{Name: "label: a namespace's opt-in label", Operation: admission.Update, Resource: "namespaces", User: admin,
		Object: mustJSON(labelled), OldObject: mustJSON(plain), Want: Want{Invoked: []string{labelPol}}})

	// One writer per record.
	mine, theirs := record(holder, nil), record(otherNode, nil)
	cs = append(cs,
		recordCase("node-records: a node creates its own record", admission.Create, nodeUser(holder), mine, nil),
		recordCase("node-records: a node updates its own record", admission.Update, nodeUser(holder), mine, mine),
		recordCase("node-records: a node deletes its own record", admission.Delete, nodeUser(holder), nil, mine),
		recordCase("node-records: a node creates another node's record", admission.Create, nodeUser(holder), theirs, nil,
			"system:node:"+holder+" may write only its own NodeRecord (named after the node), not "+otherNode),
		recordCase("node-records: a node updates another node's record", admission.Update, nodeUser(holder), theirs, theirs,
			"system:node:"+holder+" may write only its own NodeRecord"),
		recordCase("node-records: a node deletes another node's record", admission.Delete, nodeUser(holder), nil, theirs,
			"system:node:"+holder+" may write only its own NodeRecord"),
		recordCase("node-records: a member of system:nodes that is not a node", admission.Create, who("alice", nodesGroup...), record("alice", nil), nil,
			"alice may write only its own NodeRecord"),
		recordCase("node-records: a node's own record with an ownerReference", admission.Update, nodeUser(holder), record(holder, func(r *placementv1.NodeRecord) {
			r.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: otherNode, UID: "9d8c7b6a-5f4e-4d3c-8b2a-1f0e9d8c7b6a"}}
		}), mine, "a node's NodeRecord carries no ownerReferences and no finalizers"),
		recordCase("node-records: a node's own record with a finalizer", admission.Create, nodeUser(holder), record(holder, func(r *placementv1.NodeRecord) {
			r.Finalizers = []string{"example.com/keep"}
		}), nil, "a node's NodeRecord carries no ownerReferences and no finalizers"),
		recordCase("node-records: the probe, by an administrator", admission.Create, admin, record(placementv1.ProbeName, nil), nil,
			placementv1.ProbeName+" is the install probe"),
		recordCase("node-records: the probe, by a node of that name", admission.Create, nodeUser(placementv1.ProbeName), record(placementv1.ProbeName, nil), nil,
			placementv1.ProbeName+" is the install probe"),
		recordCase("node-records: an administrator deletes a probe stored before the policy", admission.Delete, admin, nil, record(placementv1.ProbeName, nil)),
		recordCase("node-records: the controller deletes a removed node's record", admission.Delete, controller, nil, theirs),
		recordCase("node-records: an administrator writes a node's record", admission.Update, admin, theirs, theirs),
	)

	// A node and a pod's identity.
	id := map[string]string{contract.AnnotationReservedDuration: "30", contract.AnnotationIdentity: "cache"}
	with := func(m map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range m {
			out[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] == "" {
				delete(out, kv[i])
			} else {
				out[kv[i]] = kv[i+1]
			}
		}
		return out
	}
	cs = append(cs,
		statusCase("pod-identity: a node updates a pod's status, its identity unchanged", nodeUser(holder), id, id, true),
		statusCase("pod-identity: a node changes another annotation", nodeUser(holder), id, with(id, "example.com/seen", "yes"), true),
		statusCase("pod-identity: a node changes a pod's identity", nodeUser(holder), id, with(id, contract.AnnotationIdentity, "db"), true,
			"a node may not change a pod's stickyip.io/identity"),
		statusCase("pod-identity: a node gives a pod an identity", nodeUser(holder), with(id, contract.AnnotationIdentity, ""), id, true,
			"a node may not change a pod's stickyip.io/identity"),
		statusCase("pod-identity: a node removes a pod's identity", nodeUser(holder), id, with(id, contract.AnnotationIdentity, ""), true,
			"a node may not change a pod's stickyip.io/identity"),
		statusCase("pod-identity: a node updates the status of a pod without annotations", nodeUser(holder), nil, nil, true),
		statusCase("pod-identity: not a node's update", controller, id, with(id, contract.AnnotationIdentity, "db"), false),
	)
	return cs
}

func slicesClone[T any](s []T) []T { return append([]T(nil), s...) }

// longName is a DNS subdomain of 253 characters starting prefix-i: the
// longest pod name, identity key or node name.
func longName(prefix string, i int) string {
	first := fmt.Sprintf("%s-%06d", prefix, i)
	first += strings.Repeat("a", 63-len(first))
	return first + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 61)
}

// largestShard is the largest shard of series the controller writes:
// keys of the longest form (253 characters) held by nodes of the longest
// names, as many as placementv1.ShardBytes of keys and values take; held
// maps each key's identity to its node. The cost pods' identities are
// among them.
func largestShard(series string) (cm *corev1.ConfigMap, held map[string]string) {
	long := map[string]string{placementv1.Names: "pod", placementv1.Keyed: "key"}[series]
	keys := map[string]string{}
	size := 0
	for i := 0; ; i++ {
		k, v := longName(long, i), longName("node", i%5000)
		if size+len(k)+len(v) > placementv1.ShardBytes {
			break
		}
		keys[k], size = v, size+len(k)+len(v)
	}
	held = map[string]string{}
	placementv1.MergeShard(held, series, keys)
	return shard(placementv1.ShardName(series, 0), keys), held
}

// costPod is a pod of the most annotations the API server allows: its
// reservation (the longest duration the plugin takes), its identity (a
// 253-character key, or none: then its 253-character name is), required
// placement, and as many others as the API server's 256 KiB leave room for;
// two required terms of its own (the hint adds to each).
func costPod(keyed bool) *corev1.Pod {
	a := map[string]string{
		contract.AnnotationReservedDuration: strings.Repeat("0", contract.MaxAnnotationValueLen-2) + "30",
		contract.AnnotationPlacement:        contract.PlacementRequired,
	}
	if keyed {
		a[contract.AnnotationIdentity] = longName("key", 0)
	}
	size := 0
	for k, v := range a {
		size += len(k) + len(v)
	}
	for i := 0; ; i++ {
		k := fmt.Sprintf("example.com/a%05d", i)
		v := strings.Repeat("v", 16)
		if size+len(k)+len(v) > maxAnnotations {
			break
		}
		a[k], size = v, size+len(k)+len(v)
	}
	p := pod(longName("pod", 0), a, false)
	p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{term("zone"), term("disk")}}}}
	return p
}

// largestRecord is a node's record of placementv1.MaxEntries entries of
// the longest names.
func largestRecord() *placementv1.NodeRecord {
	r := &placementv1.NodeRecord{TypeMeta: metav1.TypeMeta{APIVersion: placementv1.SchemeGroupVersion.String(), Kind: placementv1.NodeRecordKind},
		ObjectMeta: metav1.ObjectMeta{Name: longName("node", 0)}, Spec: placementv1.NodeRecordSpec{NodeUID: "0f5d8f2e-6a71-4c4b-8f1e-2b9d7c3a4e51"}}
	until := metav1.NewTime(since.Add(time.Hour))
	for i := range placementv1.MaxEntries {
		r.Spec.Entries = append(r.Spec.Entries, placementv1.Entry{Namespace: strings.Repeat("n", 57) + fmt.Sprintf("%06d", i%1000),
			Identity: contract.KeyedIdentity(longName("key", i)), Pod: longName("pod", i), PodUID: types.UID(fmt.Sprintf("7b0d2c61-3f4e-4a5b-9c8d-%012d", i)),
			Since: since, Until: &until, Addresses: []string{fmt.Sprintf("10.244.%d.%d", i/250, 1+i%250), fmt.Sprintf("fd00:10:244::%x", i)}})
	}
	return r
}

// costInputs are the large inputs, by testdata file name.
func costInputs() map[string]any {
	names, _ := largestShard(placementv1.Names)
	keyed, _ := largestShard(placementv1.Keyed)
	bound := costPod(true)
	bound.Spec.NodeName = longName("node", 0)
	sts := costPod(true)
	delete(sts.Annotations, contract.AnnotationReservedDuration)
	sts.OwnerReferences = pod("", nil, true).OwnerReferences
	return map[string]any{
		"shard-names-largest.json.gz": names,
		"shard-keyed-largest.json.gz": keyed,
		"pod-keyed.json.gz":           costPod(true),
		"pod-named.json.gz":           costPod(false),
		"pod-keyed-bound.json.gz":     bound,
		"pod-sts.json.gz":             sts,
		"record-largest.json.gz":      largestRecord(),
	}
}

func costCases() []Case {
	plain := namespace(nil)
	node := nodeUser(longName("node", 0))
	_, held := largestShard(placementv1.Names)
	_, keys := largestShard(placementv1.Keyed)
	maps.Copy(held, keys)
	both := []string{"shard-names-largest.json.gz", "shard-keyed-largest.json.gz"}
	required := func(node string) json.RawMessage {
		t0, t1 := term("zone"), term("disk")
		t0.MatchFields, t1.MatchFields = []corev1.NodeSelectorRequirement{hintField(node)}, []corev1.NodeSelectorRequirement{hintField(node)}
		return mustJSON(&corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{t0, t1}}}})
	}
	return []Case{
		{Name: "cost: the hint, the largest shard, a 253-character keyed identity, the most annotations, required", Operation: admission.Create, Resource: "pods",
			User: stsCtl, ObjectFile: "pod-keyed.json.gz", Namespace: plain, ParamFiles: both,
			Want: Want{Invoked: []string{hint + keyed0, podPolicy}, Affinity: required(held[contract.KeyedIdentity(longName("key", 0))])}},
		{Name: "cost: the hint, the largest shard, a 253-character pod name, the most annotations, required", Operation: admission.Create, Resource: "pods",
			User: stsCtl, ObjectFile: "pod-named.json.gz", Namespace: plain, ParamFiles: both,
			Want: Want{Invoked: []string{hint + shard0, podPolicy}, Affinity: required(held[longName("pod", 0)])}},
		{Name: "cost: the opt-in's hint, the largest shard, a labelled namespace, the most annotations", Operation: admission.Create, Resource: "pods",
			User: stsCtl, ObjectFile: "pod-keyed.json.gz", Namespace: namespace(map[string]string{contract.LabelStatefulSets: "99999.99999h99999.99999h99999.99999h-preferred-fixed"}),
			ParamFiles: both,
			Want:       Want{Invoked: []string{optInHint + keyed0, podPolicy}, Affinity: required(held[contract.KeyedIdentity(longName("key", 0))])}},
		{Name: "cost: the opt-in and its hint, a StatefulSet pod without a duration of its own, the largest shard, the most annotations", Operation: admission.Create,
			Resource: "pods", User: stsCtl, ObjectFile: "pod-sts.json.gz", Namespace: namespace(map[string]string{contract.LabelStatefulSets: "99999.99999h99999.99999h99999.99999h-preferred-fixed"}),
			ParamFiles: both,
			Want:       Want{Invoked: []string{optInHint + keyed0, optIn, podPolicy}, Affinity: required(held[contract.KeyedIdentity(longName("key", 0))])}},
		{Name: "cost: a node's status update of a pod of the most annotations", Operation: admission.Update, Resource: "pods/status",
			User: node, ObjectFile: "pod-keyed-bound.json.gz", OldObjectFile: "pod-keyed-bound.json.gz", Namespace: plain,
			Want: Want{Invoked: []string{"stickyip-pod-identity/stickyip-pod-identity"}}},
		{Name: "cost: the controller writes the largest shard", Operation: admission.Update, Resource: "configmaps",
			User: controller, ObjectFile: "shard-keyed-largest.json.gz", OldObjectFile: "shard-keyed-largest.json.gz", Namespace: plain,
			Want: Want{Invoked: []string{indexWriter}}},
		{Name: "cost: a namespace's editor writes a ConfigMap as large as the largest shard", Operation: admission.Update, Resource: "configmaps",
			User: who("alice", "system:authenticated"), ObjectFile: "shard-names-largest.json.gz", OldObjectFile: "shard-names-largest.json.gz", Namespace: plain,
			Want: Want{Invoked: []string{indexWriter}, Denied: []string{"ValidatingAdmissionPolicy 'stickyip-index-writer' with binding 'stickyip-index-writer' denied request: ConfigMap stickyip-placement-names-0: the placement index"}}},
		{Name: "cost: a node writes its largest record", Operation: admission.Update, Resource: "noderecords",
			User: node, ObjectFile: "record-largest.json.gz", OldObjectFile: "record-largest.json.gz",
			Want: Want{Invoked: []string{"stickyip-node-records/stickyip-node-records"}}},
	}
}

// testdata returns every file of testdata/ this file makes, by name.
func testdata(t *testing.T) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	cases, err := json.MarshalIndent(slices.Concat(behaviourCases(), indexWriterCases(), costCases()), "", " ")
	if err != nil {
		t.Fatal(err)
	}
	out["cases.json"] = append(cases, '\n')
	for name, obj := range costInputs() {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		if err := json.NewEncoder(w).Encode(obj); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		out[name] = b.Bytes()
	}
	return out
}

// TestCasesAreCurrent: testdata/ is what this file makes (compared
// uncompressed: gzip's bytes may change with Go's compressor). With
// -update, it writes them.
func TestCasesAreCurrent(t *testing.T) {
	want := testdata(t)
	if *update {
		old, _ := filepath.Glob(filepath.Join(testdataDir, "*"))
		for _, p := range old {
			if _, ok := want[filepath.Base(p)]; !ok {
				if err := os.Remove(p); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := os.MkdirAll(testdataDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, b := range want {
			if err := os.WriteFile(filepath.Join(testdataDir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	files, _ := filepath.Glob(filepath.Join(testdataDir, "*"))
	if len(files) != len(want) {
		t.Errorf("testdata/ holds %d files, cases_test.go makes %d: go test -run TestCasesAreCurrent -update", len(files), len(want))
	}
	for name, b := range want {
		got := readTestdata(t, name)
		if strings.HasSuffix(name, ".gz") {
			r, err := gzip.NewReader(bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			var u bytes.Buffer
			if _, err := u.ReadFrom(r); err != nil {
				t.Fatal(err)
			}
			b = u.Bytes()
		}
		if !bytes.Equal(got, b) {
			t.Errorf("testdata/%s is not what cases_test.go makes: go test -run TestCasesAreCurrent -update", name)
		}
	}
}

// TestRunnerIsShared: k136/admission_test.go is admission_test.go, so that
// both modules run the same cases the same way.
func TestRunnerIsShared(t *testing.T) {
	a, err := os.ReadFile("admission_test.go")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join("k136", "admission_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Error("k136/admission_test.go differs from admission_test.go: cp admission_test.go k136/")
	}
}

// shardCase is a write of a ConfigMap of ns by u.
func shardCase(name string, op admission.Operation, u userInfo, obj, old *corev1.ConfigMap, denied ...string) Case {
	c := Case{Name: name, Operation: op, Resource: "configmaps", User: u, Namespace: namespace(nil)}
	if obj != nil {
		c.Object = mustJSON(obj)
	}
	if old != nil {
		c.OldObject = mustJSON(old)
	}
	c.Want.Invoked = []string{indexWriter}
	for _, d := range denied {
		c.Want.Denied = append(c.Want.Denied, "ValidatingAdmissionPolicy 'stickyip-index-writer' with binding 'stickyip-index-writer' denied request: "+d)
	}
	return c
}

const indexWriter = "stickyip-index-writer/stickyip-index-writer"

// indexWriterCases: the index's one writer, and only the index.
func indexWriterCases() []Case {
	editor := who("alice", "system:authenticated")
	s := shard(shard0, map[string]string{"db-0": holder})
	k := shard(keyed0, map[string]string{"cache": holder})
	other := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: "app-config", Namespace: ns}, Data: map[string]string{"db-0": holder}}
	labelled := other.DeepCopy()
	labelled.Labels = map[string]string{placementv1.IndexLabel: placementv1.Names}
	unlabelled := s.DeepCopy()
	unlabelled.Labels = nil
	wrongSeries := s.DeepCopy()
	wrongSeries.Labels[placementv1.IndexLabel] = placementv1.Keyed
	binary := s.DeepCopy()
	binary.BinaryData = map[string][]byte{"x": {1}}
	held := s.DeepCopy()
	held.Finalizers = []string{"example.com/hold"}
	owned := s.DeepCopy()
	owned.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Namespace", Name: ns, UID: "5e2c1a3b-7d4f-4e6a-9b8c-0d1e2f3a4b5c"}}
	forged := s.DeepCopy()
	forged.Data["db-0"] = otherNode
	const alone = "ConfigMap %s: the placement index (a shard's name or the stickyip.io/placement-index label) is written by stickyip-controller alone"
	const only = "ConfigMap %s: stickyip-controller writes only the placement index's shards"
	notInvoked := func(c Case) Case { c.Want = Want{}; return c }
	return []Case{
		shardCase("index-writer: the controller creates a shard", admission.Create, controller, s, nil),
		shardCase("index-writer: the controller creates a keyed shard", admission.Create, controller, k, nil),
		shardCase("index-writer: the controller patches a shard", admission.Update, controller, forged, s),
		shardCase("index-writer: the controller deletes a shard", admission.Delete, controller, nil, s),
		shardCase("index-writer: the controller takes an unlabelled ConfigMap of a shard's name", admission.Update, controller, s, unlabelled),
		shardCase("index-writer: the controller writes another ConfigMap", admission.Create, controller, other, nil, fmt.Sprintf(only, other.Name)),
		shardCase("index-writer: the controller updates another ConfigMap", admission.Update, controller, other, other, fmt.Sprintf(only, other.Name)),
		shardCase("index-writer: the controller deletes another ConfigMap", admission.Delete, controller, nil, other, fmt.Sprintf(only, other.Name)),
		shardCase("index-writer: the controller writes a shard without its label", admission.Create, controller, unlabelled, nil, fmt.Sprintf(only, shard0)),
		shardCase("index-writer: the controller writes a shard labelled with the other series", admission.Create, controller, wrongSeries, nil, fmt.Sprintf(only, shard0)),
		shardCase("index-writer: the controller writes a shard with binaryData", admission.Create, controller, binary, nil, fmt.Sprintf(only, shard0)),
		shardCase("index-writer: the controller puts a finalizer on a shard", admission.Update, controller, held, s, fmt.Sprintf(only, shard0)),
		shardCase("index-writer: the controller gives a shard an owner", admission.Update, controller, owned, s, fmt.Sprintf(only, shard0)),
		shardCase("index-writer: a namespace's editor creates a shard", admission.Create, editor, s, nil, fmt.Sprintf(alone, shard0)),
		shardCase("index-writer: a namespace's editor creates an unlabelled ConfigMap of a shard's name", admission.Create, editor, unlabelled, nil, fmt.Sprintf(alone, shard0)),
		shardCase("index-writer: a namespace's editor labels a ConfigMap of its own", admission.Update, editor, labelled, other, fmt.Sprintf(alone, other.Name)),
		shardCase("index-writer: a namespace's editor changes a shard", admission.Update, editor, forged, s, fmt.Sprintf(alone, shard0)),
		shardCase("index-writer: a namespace's editor takes a shard's label off", admission.Update, editor, unlabelled, s, fmt.Sprintf(alone, shard0)),
		shardCase("index-writer: a node creates a shard", admission.Create, nodeUser(holder), s, nil, fmt.Sprintf(alone, shard0)),
		shardCase("index-writer: an administrator creates a shard", admission.Create, admin, s, nil, fmt.Sprintf(alone, shard0)),
		shardCase("index-writer: a namespace's editor deletes a shard (the controller writes it again)", admission.Delete, editor, nil, s),
		notInvoked(shardCase("index-writer: a namespace's editor writes a ConfigMap of its own", admission.Create, editor, other, nil)),
		notInvoked(shardCase("index-writer: a namespace's editor updates a former shard", admission.Update, editor, formerShard(), formerShard())),
	}
}

// formerShard is a ConfigMap of the former index's names, which the
// policy leaves to the former policies.
func formerShard() *corev1.ConfigMap {
	return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: "stickyip-index-0", Namespace: ns, Labels: map[string]string{"stickyip.io/index": "0"}},
		Data:       map[string]string{holder: "db-0 db-0 7 2026-11-30T10:00:00.000Z - 10.0.0.5"}}
}
