//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/stickyip/stickyip/checkpointd/kube"
	"github.com/stickyip/stickyip/checkpointd/placement"
	"github.com/stickyip/stickyip/checkpointd/rebuild"
	"github.com/stickyip/stickyip/contract/placementv1"
)

// rbacWant is in RBAC's refusal of any write of resource of the stickyip.io
// group (the verb varies with the write path).
func rbacWant(resource string) string {
	return fmt.Sprintf("resource %q in API group %q", resource, placementv1.Group)
}

// shardsRBACWant is in RBAC's refusal of any write of ConfigMaps, the
// shards' resource.
var shardsRBACWant = fmt.Sprintf("resource %q in API group %q", "configmaps", "")

// writer is someone who writes what is not theirs: a name, a token, and the
// user and groups RBAC knows them by.
type writer struct {
	name, token, user string
	groups            []string
}

// subject is w as a ClusterRoleBinding's subject.
func (w writer) subject() rbacv1.Subject {
	if ns, name, ok := strings.Cut(strings.TrimPrefix(w.user, "system:serviceaccount:"), ":"); ok && strings.HasPrefix(w.user, "system:serviceaccount:") {
		return rbacv1.Subject{Kind: "ServiceAccount", Namespace: ns, Name: name}
	}
	return rbacv1.Subject{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: w.user}
}

// saWriter is ServiceAccount ns/name with token.
func saWriter(what, ns, name, token string) writer {
	return writer{name: what, token: token, user: "system:serviceaccount:" + ns + ":" + name,
		groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}}
}

// advRBAC: the controller's objects — the index shards, the records'
// status — and, for a namespace's administrator, the records: no write of
// a node, a member of system:nodes that is no node, or a namespace's
// administrator (the default admin role there) reaches them, on any path;
// each refusal RBAC's, naming the resource, or for the administrator's
// shard writes (RBAC grants it ConfigMaps) stickyip-index-writer's; the
// administrator's deletion of a shard is taken, and the controller writes
// it again. The control: the same writes taken once a grant lets the
// writer (on objects the controller does not manage: a ConfigMap that is no
// shard), refused again once it goes.
func (a *adversary) advRBAC() {
	for _, w := range []writer{
		{name: "evil", token: a.token(nodeUser(advEvil)), user: nodeUser(advEvil), groups: []string{"system:nodes", "system:authenticated"}},
		{name: nodesGroupUser, token: a.token(nodesGroupUser), user: nodesGroupUser, groups: []string{"system:nodes", "system:authenticated"}},
		saWriter(advNS+"'s administrator", advNS, "ns-admin", a.nsAdminToken()),
	} {
		a.controllersObjects(w, !strings.HasPrefix(w.user, "system:serviceaccount:"))
	}
}

// controllersObjects tries w's writes of the controller's objects, and of
// the records unless w is in system:nodes (whose RBAC lets it write
// records; the NodeRecord policy then refuses: advRecords), each refused
// by RBAC, then the same on scratch objects with a grant, taken.
func (a *adversary) controllersObjects(w writer, node bool) {
	t := a.t
	ctx := context.Background()
	c := a.quietClient(w.token)
	shard := a.shardOf(advNS, "db0-1")
	idx := c.Resource(indexGVR).Namespace(advNS)
	adminIdx := a.cp.indexAs(a.cp.adminToken, advNS)
	stealShard := func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, advEvil, "data", "db0-1")
	}
	victim := advVictims[0]
	// Whom RBAC lets write ConfigMaps there (a namespace's administrator)
	// meets stickyip-index-writer; the others RBAC.
	editor := a.mayPatchConfigMaps(w, advNS)
	want, createWant := shardsRBACWant, shardsRBACWant
	if editor {
		want, createWant = indexWriterRefusal(shard), indexWriterRefusal(shard9)
	}
	refusedEverywhere(t, w.name, "point db0-1 at evil in "+advNS+"/"+shard, idx, adminIdx, shard, stealShard, want)
	refusedEverywhere(t, w.name, "label "+advNS+"/"+shard+" as the other series", idx, adminIdx, shard, func(u *unstructured.Unstructured) {
		u.SetLabels(map[string]string{placementv1.IndexLabel: placementv1.Keyed})
	}, want)
	refusedEverywhere(t, w.name, "take "+advNS+"/"+shard+"'s label off", idx, adminIdx, shard, func(u *unstructured.Unstructured) {
		u.SetLabels(nil)
	}, want)
	if editor {
		a.shardDeletedAndBack(w, idx, shard)
	} else {
		refusedEverywhere(t, w.name, "delete "+advNS+"/"+shard, idx, adminIdx, shard, nil, want)
	}
	_, err := idx.Create(ctx, indexObject(advNS, shard9, map[string]string{"db0-1": advEvil}), metav1.CreateOptions{})
	requireRefused(t, w.name+" creating "+advNS+"/"+shard9, err, createWant)
	status := func(r dynamic.ResourceInterface, name string) map[string]func() error {
		body := []byte(`{"status":{"nodeUID":"` + string(a.uids[advEvil]) + `","claims":[{"namespace":"adv","identity":"db0-1","pod":"ev-0","podUID":"` +
			string(a.evilBase[0].PodUID) + `","indexed":true}]}}`)
		return map[string]func() error{
			"merge patch": func() error {
				_, err := r.Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{}, "status")
				return err
			},
			"update": func() error {
				cur, err := a.admin.Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				_ = unstructured.SetNestedField(cur.Object, "made-up", "status", "nodeUID")
				_, err = r.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
				return err
			},
		}
	}
	recs := c.Resource(recordsGVR)
	for _, name := range []string{victim, advEvil} {
		before := a.cp.recordOf(name)
		for path, write := range status(recs, name) {
			requireRefused(t, fmt.Sprintf("%s writing %s's record's status by %s", w.name, name, path), write(), rbacWant("noderecords/status"))
		}
		if after := a.cp.recordOf(name); after.ResourceVersion != before.ResourceVersion {
			t.Fatalf("%s's record changed: %+v", name, after.Status)
		}
	}
	if !node {
		refusedEverywhere(t, w.name, "rewrite "+victim+"'s entries", recs, a.admin, victim, a.recordChanges()[0].mutate, rbacWant("noderecords"))
		refusedEverywhere(t, w.name, "delete "+victim+"'s record", recs, a.admin, victim, nil, rbacWant("noderecords"))
		_, err := recs.Create(ctx, recordObject("node-y", string(a.uids[advEvil])), metav1.CreateOptions{})
		requireRefused(t, w.name+" creating a record", err, rbacWant("noderecords"))
	}

	// The control: the same writes with a grant, on a ConfigMap that is no
	// shard (no shard's name, no label) and a record of no Node.
	scratch := indexObject(advCtlNS, "scratch", map[string]string{"db0-1": victim})
	scratch.SetLabels(nil)
	if _, err := a.cp.indexAs(a.cp.adminToken, advCtlNS).Create(ctx, scratch, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.admin.Create(ctx, recordObject("scratch", "00000000-0000-0000-0000-000000000005"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a.withGrant(w, func() {
		ctlIdx := c.Resource(indexGVR).Namespace(advCtlNS)
		a.takenEverywhere(w.name, "point db0-1 at evil in "+advCtlNS+"/scratch", ctlIdx, a.cp.indexAs(a.cp.adminToken, advCtlNS), "scratch", stealShard)
		for path, write := range status(recs, "scratch") {
			requireAccepted(t, fmt.Sprintf("%s writing the scratch record's status by %s with the grant", w.name, path), write())
		}
		if !node {
			a.takenEverywhere(w.name, "rewrite the scratch record's entries", recs, a.admin, "scratch", a.recordChanges()[0].mutate)
		}
		requireAccepted(t, w.name+" deleting "+advCtlNS+"/scratch with the grant", ctlIdx.Delete(ctx, "scratch", metav1.DeleteOptions{}))
	})
	if err := a.admin.Delete(ctx, "scratch", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// shardDeletedAndBack deletes shard of advNS as w (a namespace's
// administrator: RBAC lets it, and so does stickyip-index-writer, as it
// lets the namespace controller) and waits until the controller has
// written it again, holding what it held.
func (a *adversary) shardDeletedAndBack(w writer, idx dynamic.ResourceInterface, shard string) {
	t := a.t
	ctx := context.Background()
	before := a.cp.indexIn(advNS)
	start := time.Now()
	requireAccepted(t, w.name+" deleting "+advNS+"/"+shard, idx.Delete(ctx, shard, metav1.DeleteOptions{}))
	eventually(t, "the controller writing "+advNS+"/"+shard+" again", time.Minute, 100*time.Millisecond, func() (bool, string) {
		got := a.cp.indexIn(advNS)
		return maps.Equal(got, before), fmt.Sprintf("%d identities of %d", len(got), len(before))
	})
	t.Logf("%s deleted %s/%s: the controller wrote it again, whole, within %v", w.name, advNS, shard, time.Since(start).Round(time.Millisecond))
}

// shardOf names the shard of ns that holds identity.
func (a *adversary) shardOf(ns, identity string) string {
	a.t.Helper()
	series, key := placementv1.ShardKey(identity)
	l, err := a.cp.client.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{LabelSelector: placementv1.IndexLabel + "=" + series})
	if err != nil {
		a.t.Fatal(err)
	}
	for _, cm := range l.Items {
		if _, ok := cm.Data[key]; ok {
			return cm.Name
		}
	}
	a.t.Fatalf("no shard of %s holds %s", ns, identity)
	return ""
}

// takenEverywhere makes change of object name by every write path, as r,
// each from the object as it is then, and fails the test unless each was
// taken and changed it (the object is put back between paths, as admin).
func (a *adversary) takenEverywhere(who, what string, r, admin dynamic.ResourceInterface, name string, mutate func(*unstructured.Unstructured)) {
	t := a.t
	t.Helper()
	ctx := context.Background()
	orig, err := admin.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := orig.DeepCopy()
	mutate(want)
	for _, path := range slices.Sorted(mapsKeys(writePaths(t, r, orig, want))) {
		cur, err := admin.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		to := cur.DeepCopy()
		mutate(to)
		err = writePaths(t, r, cur, to)[path]()
		after, gerr := admin.Get(ctx, name, metav1.GetOptions{})
		if err != nil || gerr != nil || string(bare(after)) == string(bare(cur)) {
			t.Fatalf("%s: %s by %s with the grant (the control): %v, want taken and the object changed (%v)", who, what, path, err, gerr)
		}
		back := orig.DeepCopy()
		back.SetResourceVersion(after.GetResourceVersion())
		if _, err := admin.Update(ctx, back, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%s: %s with the grant (the control): taken on every path", who, what)
}

// withGrant lets w write every placement object (a ClusterRole and its
// binding, adv-control) while do runs; it waits until the API server's
// authorizer answers yes before, and no after.
func (a *adversary) withGrant(w writer, do func()) {
	t := a.t
	t.Helper()
	ctx := context.Background()
	rbac := a.cp.client.RbacV1()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "adv-control"}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{placementv1.Group}, Resources: []string{"noderecords", "noderecords/status"}, Verbs: []string{"*"}}, {
		APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"*"}}}}
	if _, err := rbac.ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "adv-control"},
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name}, Subjects: []rbacv1.Subject{w.subject()}}
	if _, err := rbac.ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	revoked := false
	revoke := func() {
		if revoked {
			return
		}
		revoked = true
		if err := rbac.ClusterRoleBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		if err := rbac.ClusterRoles().Delete(ctx, role.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		a.waitAllowed(w, false)
	}
	t.Cleanup(revoke)
	a.waitAllowed(w, true)
	do()
	revoke()
}

// reviewConfigMapPatch asks the API server's authorizers whether w may
// patch the ConfigMaps of ns.
func (a *adversary) reviewConfigMapPatch(w writer, ns string) (*authorizationv1.SubjectAccessReview, error) {
	return a.cp.client.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{User: w.user, Groups: w.groups, ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: ns, Verb: "patch", Resource: "configmaps"}}}, metav1.CreateOptions{})
}

// mayPatchConfigMaps reports whether w may patch the ConfigMaps of ns.
func (a *adversary) mayPatchConfigMaps(w writer, ns string) bool {
	r, err := a.reviewConfigMapPatch(w, ns)
	if err != nil {
		a.t.Fatal(err)
	}
	return r.Status.Allowed
}

// waitAllowed waits until the API server's authorizers answer allowed for
// w's patch of the ConfigMaps of advCtlNS.
func (a *adversary) waitAllowed(w writer, allowed bool) {
	eventually(a.t, fmt.Sprintf("%s allowed to patch configmaps: %v", w.name, allowed), time.Minute, 50*time.Millisecond, func() (bool, string) {
		r, err := a.reviewConfigMapPatch(w, advCtlNS)
		if err != nil {
			return false, err.Error()
		}
		return r.Status.Allowed == allowed, r.Status.Reason
	})
}

// advClaims: claims the API server takes (a node writes what it likes in
// its own record) and the controller refuses, each naming why, the honest
// index unchanged; beside each, evil's claim of its own pod is indexed (the
// control). And the one way a node could make a pod back its claim — change
// its pod's stickyip.io/identity through pods/status — refused by
// stickyip-pod-identity, another annotation taken there.
func (a *adversary) advClaims() {
	t := a.t
	ctx := context.Background()
	cp := a.cp
	for _, p := range a.evilPods {
		if c := cp.claimOf(advEvil, advNS, p); c == nil || !c.Accepted() || !c.Indexed {
			t.Fatalf("evil's claim of its own pod %s (the control): %+v, want accepted and indexed", p, c)
		}
	}
	// A mirror pod evil makes of a victim's identity (NodeRestriction lets a
	// kubelet make one, of any name, bound to itself).
	yes := true
	mirror := testPod("db0-1", map[string]string{"kubernetes.io/config.mirror": "adv", annIdentity: "queue"})
	mirror.Namespace, mirror.Spec.NodeName = advNS, advEvil
	mirror.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: advEvil, UID: a.uids[advEvil], Controller: &yes}}
	made, err := cp.clientAs(a.token(nodeUser(advEvil))).CoreV1().Pods(advNS).Create(ctx, mirror, metav1.CreateOptions{})
	requireAccepted(t, "evil making a mirror pod db0-1 (identity queue)", err)
	victimPod, err := cp.client.CoreV1().Pods(advNS).Get(ctx, "queue-7d9f8-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	evilPod := a.evilBase[1]
	for _, c := range []struct {
		what  string
		entry placementv1.Entry
		want  string
	}{
		{"identity:queue for victim-1's pod", recordEntry(advNS, "identity:queue", victimPod.Name, string(victimPod.UID), "10.244.9.3"),
			"bound to node victim-1, not evil"},
		{"db0-1 for its mirror pod db0-1", recordEntry(advNS, "db0-1", "db0-1", string(made.UID), "10.244.9.4"), "a mirror pod"},
		{"identity:queue for its mirror pod db0-1", recordEntry(advNS, "identity:queue", "db0-1", string(made.UID), "10.244.9.4"), "a mirror pod"},
		{"identity:cache for its pod " + evilPod.Pod + ", which carries no key", recordEntry(advNS, "identity:cache", evilPod.Pod, string(evilPod.PodUID), "10.244.9.5"),
			"its identity is " + evilPod.Pod + ", not identity:cache"},
		{"db0-2 for its pod " + evilPod.Pod, recordEntry(advNS, "db0-2", "db0-2", string(evilPod.PodUID), "10.244.9.5"), "the pod of that uid is named " + evilPod.Pod},
	} {
		err := cp.claimAs(advEvil, c.entry)
		if err == nil || !strings.HasPrefix(err.Error(), "claim refused:") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("evil claiming %s: %v, want the controller's refusal with %q", c.what, err, c.want)
		} else {
			t.Logf("evil claiming %s: %v", c.what, err)
		}
		a.check("evil's claim of "+c.what, made.Name) // a pod of that name exists: the mirror pod
		cp.releaseAs(advEvil, c.entry.Namespace, c.entry.Identity)
	}
	a.restoreEvil()
	a.deletePod(advNS, made.Name)
	eventually(t, "a ClaimRefused Event on evil's record", time.Minute, 200*time.Millisecond, func() (bool, string) {
		evs, err := cp.client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=NodeRecord,involvedObject.name=" + advEvil})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.Reason == "ClaimRefused" {
				t.Logf("Event on NodeRecord evil: %s: %s", e.Reason, e.Message)
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d Events", len(evs.Items))
	})

	// pods/status: the key of a pod of its own.
	c := cp.clientAs(a.token(nodeUser(advEvil)))
	set := func(key, value string) error {
		p, err := c.CoreV1().Pods(advNS).Get(ctx, a.evilPods[2], metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[key] = value
		_, err = c.CoreV1().Pods(advNS).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	}
	requireAccepted(t, "evil setting another annotation of its pod "+a.evilPods[2]+" through pods/status", set("example.com/seen", "yes"))
	requireRefused(t, "evil giving its pod "+a.evilPods[2]+" the key queue through pods/status", set(annIdentity, "queue"),
		"'stickyip-pod-identity' with binding 'stickyip-pod-identity' denied request: a node may not change a pod's stickyip.io/identity")
	p, err := cp.client.CoreV1().Pods(advNS).Get(ctx, a.evilPods[2], metav1.GetOptions{})
	if err != nil || p.Annotations[annIdentity] != "" {
		t.Fatalf("evil's pod %s after the refused write: %v (%v)", a.evilPods[2], p.Annotations, err)
	}
}

// flannelNS, flannelSA: a DaemonSet's ServiceAccount with flannel's rights
// (nodes/status patch, which carries a Node's metadata), one of whose pods
// is bound to evil.
const (
	flannelNS = "kube-flannel"
	flannelSA = "flannel"
)

// mintFlannelToken makes flannel's ServiceAccount, its rights and a pod of
// it bound to evil, and has evil mint its token (TokenRequest, bound to
// that pod: the Node authorizer lets a node, NodeRestriction checks the
// pod is bound to it).
func (a *adversary) mintFlannelToken() string {
	t := a.t
	ctx := context.Background()
	cs := a.cp.client
	a.cp.ensureNamespace(flannelNS)
	if _, err := cs.CoreV1().ServiceAccounts(flannelNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: flannelSA}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "adv-flannel"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"patch"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "adv-flannel"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: flannelNS, Name: flannelSA}}}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pod, err := cs.CoreV1().Pods(flannelNS).Get(ctx, "kube-flannel-ds-evil", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		// Its token mounted, as flannel's DaemonSet has it: a node may mint
		// a token only for an audience its pod's volumes name.
		yes := true
		p := testPod("kube-flannel-ds-evil", nil)
		p.Namespace, p.Spec.NodeName, p.Spec.ServiceAccountName, p.Spec.AutomountServiceAccountToken = flannelNS, advEvil, flannelSA, &yes
		pod, err = cs.CoreV1().Pods(flannelNS).Create(ctx, p, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	tr, err := a.cp.clientAs(a.token(nodeUser(advEvil))).CoreV1().ServiceAccounts(flannelNS).CreateToken(ctx, flannelSA, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}}},
		metav1.CreateOptions{})
	requireAccepted(t, "evil minting the token of "+flannelNS+"/"+flannelSA+" for its pod "+pod.Name, err)
	return tr.Status.Token
}

// advMintedToken: the token evil mints for flannel's pod on it may patch
// any Node's status, metadata included (the control: it sets an
// annotation on victim-1's Node, the one the former design read back); it
// writes no record, no status and no index shard (RBAC's refusals; the
// control: a grant lets the same writes in), and a re-imaged victim-1
// takes back, from its own record alone, exactly its entries.
func (a *adversary) advMintedToken() {
	t := a.t
	ctx := context.Background()
	tok := a.mintFlannelToken()
	victim := advVictims[0]
	flannel := a.cp.clientAs(tok)
	_, err := flannel.CoreV1().Nodes().Patch(ctx, victim, types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"stickyip.io/placement-shards":"adv/stickyip-index-0=999999999","adv.stickyip.io/x":"y"},"labels":{"adv.stickyip.io/x":"y"}}}`),
		metav1.PatchOptions{}, "status")
	requireAccepted(t, "evil's minted flannel token rewriting "+victim+"'s Node's annotations and labels through nodes/status", err)
	w := saWriter("evil's minted flannel token", flannelNS, flannelSA, tok)
	a.controllersObjects(w, false)
	r := a.cp.recordsAs(tok)
	_, err = r.Patch(ctx, advEvil, types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
	requireRefused(t, "the minted token writing evil's own record", err, rbacWant("noderecords"))

	// The take-back of a re-imaged victim-1: its checkpointd reads its own
	// record, with its own credentials, whatever the Node carries.
	client, err := kube.NewREST(a.cp.apiClientConfig(a.token(nodeUser(victim))))
	if err != nil {
		t.Fatal(err)
	}
	node, err := a.cp.client.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := rebuild.RecordIndex{Reader: placement.NewAPI(client, victim)}.ReadOwn(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range got {
		if e.Disowned || e.LaterBy != "" {
			t.Errorf("re-imaged %s takes back %s/%s disowned %v, later by %q", victim, e.Namespace, e.Identity, e.Disowned, e.LaterBy)
		}
		ids = append(ids, e.Identity)
	}
	var want []string
	for id, v := range a.want {
		if v == victim {
			want = append(want, id)
		}
	}
	slices.Sort(ids)
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		t.Fatalf("re-imaged %s takes back %v, want %v (its Node's annotations %v)", victim, ids, want, node.Annotations)
	}
	t.Logf("re-imaged %s takes back %v from its own record; its Node's annotations, rewritten by the minted token (%v), play no part", victim, ids, node.Annotations)
	if _, err := a.cp.client.CoreV1().Nodes().Patch(ctx, victim, types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"stickyip.io/placement-shards":null,"adv.stickyip.io/x":null},"labels":{"adv.stickyip.io/x":null}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}
