//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/stickyip/stickyip/test/harness"
)

// No install window. A node writing another node's NodeRecord, and
// stickyip-controller's credentials writing a ConfigMap that is no shard,
// as fast as the API server answers, during each documented install,
// upgrade, uninstall and re-install of deploy/placement (kubectl apply -k,
// the Kustomizations' files through the API, the Helm chart), get no write
// accepted: before the grants of deploy/placement/nodes exist RBAC refuses
// them, and the grants are applied only once the probe shows the policies
// in effect (stickyip-node-records the last, stickyip-index-writer before
// it). The control: the same floods with the grants and without each
// policy's binding are taken, so a refusal above is the policy's or
// RBAC's, not a write that could never land. On a control plane alone.
const (
	winNode   = "flooder"
	winVictim = "victim"
)

func TestPlacementInstallWindow(t *testing.T) {
	bins := findBins(t)
	netns, h := newNetns(t, "win")
	cp := newControlPlane(t, bins, harness.ShortTempDir(t), testLogDir(t), netns, h, "127.0.0.1", winNode, winVictim)
	cp.startControlPlane()
	ctx := context.Background()
	for _, name := range []string{winNode, winVictim} {
		if _, err := cp.client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	f, cf := recordFlood(cp), indexFlood(cp)
	dir, nodes := placementDirs(t)
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	step := func(what string, do func()) {
		t.Helper()
		f.start()
		cf.start()
		do()
		time.Sleep(2 * time.Second) // the writes go on a while after
		f.stop(t, what, false)
		cf.stop(t, what, false)
	}
	granted := func(want bool) {
		t.Helper()
		for _, name := range []string{nodesGrant, "stickyip:controller-index"} {
			_, err := cp.client.RbacV1().ClusterRoleBindings().Get(ctx, name, metav1.GetOptions{})
			if (err == nil) != want {
				t.Fatalf("ClusterRoleBinding %s: %v, want it there: %v", name, err, want)
			}
		}
	}
	if cp.kubectlPath() != "" {
		step("kubectl apply -k deploy/placement, the probe refused, kubectl apply -k deploy/placement/nodes", func() {
			cp.kubectl("apply", "-k", dir)
			granted(false)
			t.Logf("kubectl apply -k: the NodeRecord policy in effect after %v", cp.waitRecordsPolicy().Round(time.Millisecond))
			cp.kubectl("apply", "-k", nodes)
			granted(true)
		})
		step("kubectl apply -k again (an upgrade)", func() { cp.kubectl("apply", "-k", dir); cp.kubectl("apply", "-k", nodes) })
		f.control(t)
		cf.control(t)
		step("kubectl delete -k deploy/placement/nodes, then deploy/placement", func() {
			cp.kubectl("delete", "-k", nodes)
			cp.kubectl("delete", "-k", dir)
			granted(false)
		})
	} else {
		step("the resources of deploy/placement applied, the probe refused, those of deploy/placement/nodes", func() {
			cp.applyKustomization(dir)
			granted(false)
			t.Logf("the NodeRecord policy in effect after %v", cp.waitRecordsPolicy().Round(time.Millisecond))
			cp.applyKustomization(nodes)
			granted(true)
		})
		f.control(t)
		cf.control(t)
		step("deploy/placement/nodes deleted, then deploy/placement", func() {
			cp.deleteKustomization(nodes)
			cp.deleteKustomization(dir)
			granted(false)
		})
	}
	chart := filepath.Join(root, "deploy", "helm", "stickyip")
	for _, round := range []string{"install", "re-install"} {
		step("helm "+round+" with placement.enabled, the probe refused (NOTES), helm upgrade --reuse-values", func() {
			out := cp.helm("install", stickyipRelease, chart, "-n", "kube-system", "--set", "placement.enabled=true")
			granted(false)
			if !strings.Contains(out, "stickyip-probe") {
				t.Errorf("helm install's NOTES do not say how to see the NodeRecord policy in effect:\n%s", out)
			}
			t.Logf("helm %s: the NodeRecord policy in effect after %v", round, cp.waitRecordsPolicy().Round(time.Millisecond))
			cp.helm("upgrade", stickyipRelease, chart, "-n", "kube-system", "--reuse-values")
			granted(true)
		})
		step("helm upgrade with a changed value", func() {
			cp.helm("upgrade", stickyipRelease, chart, "-n", "kube-system", "--reuse-values", "--set", "placement.statefulSets=30m")
		})
		step("helm uninstall", func() {
			cp.helm("uninstall", stickyipRelease, "-n", "kube-system")
			granted(false)
		})
	}
	t.Logf("%d writes of node %s on %s's record, %d of stickyip-controller on kube-system/%s, during the installs, upgrades and uninstalls: none taken",
		f.total, winNode, winVictim, cf.total, winConfigMap)
}

// flood is a writer writing what is not its own as fast as the API
// server answers, two at a time: a node another node's record
// (recordFlood), stickyip-controller a ConfigMap that is no shard
// (indexFlood).
type flood struct {
	cp *controlPlane
	// who writes; write makes one write; rule is in the refusal of the
	// policy under test, ruleName names it, binding is its
	// ValidatingAdmissionPolicyBinding (the control removes it); made
	// reports whether what a taken write makes exists, undo removes it.
	who, rule, ruleName, binding string
	write                        func() error
	made                         func() bool
	undo                         func()

	done  chan struct{}
	wg    sync.WaitGroup
	tried int64
	taken []string
	codes map[string]int
	mu    sync.Mutex
	total int64
}

// recordFlood: node winNode writes winVictim's record (an entry of its
// own, created when missing, else its spec merge-patched).
func recordFlood(cp *controlPlane) *flood {
	r := cp.recordsAs(cp.tokens[nodeUser(winNode)])
	return &flood{cp: cp, who: "node " + winNode, rule: "may write only its own NodeRecord", ruleName: "the NodeRecord policy",
		binding: "stickyip-node-records",
		write: func() error {
			ctx := context.Background()
			e := recordEntry("default", "web-0", "web-0", "00000000-0000-0000-0000-0000000000aa", "10.244.9.9")
			obj := recordObject(winVictim, "00000000-0000-0000-0000-0000000000bb", e)
			_, err := r.Patch(ctx, winVictim, types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"nodeUID":%q}}`, "00000000-0000-0000-0000-0000000000cc")), metav1.PatchOptions{})
			if apierrors.IsNotFound(err) {
				_, err = r.Create(ctx, obj, metav1.CreateOptions{})
			}
			return err
		},
		made: func() bool { return cp.recordOf(winVictim) != nil },
		undo: func() {
			if err := cp.recordsAs(cp.adminToken).Delete(context.Background(), winVictim, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				cp.t.Fatal(err)
			}
		},
	}
}

// winConfigMap is a ConfigMap of the cluster's that no placement object
// is: stickyip-controller's flood tries to change it.
const winConfigMap = "cluster-settings"

// indexFlood: stickyip-controller's credentials change kube-system's
// winConfigMap (created here by the administrator), which RBAC lets once
// the controller's ConfigMap grant exists and stickyip-index-writer
// refuses.
func indexFlood(cp *controlPlane) *flood {
	ctx := context.Background()
	admin := cp.client.CoreV1().ConfigMaps("kube-system")
	if _, err := admin.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: winConfigMap}, Data: map[string]string{"mode": "a"}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		cp.t.Fatal(err)
	}
	c := cp.clientAs(cp.tokens[placementControllerUser]).CoreV1().ConfigMaps("kube-system")
	return &flood{cp: cp, who: "stickyip-controller", rule: "stickyip-controller writes only the placement index's shards",
		ruleName: "the index-writer policy", binding: "stickyip-index-writer",
		write: func() error {
			_, err := c.Patch(ctx, winConfigMap, types.MergePatchType, []byte(`{"data":{"mode":"stickyip"}}`), metav1.PatchOptions{})
			return err
		},
		made: func() bool {
			cm, err := admin.Get(ctx, winConfigMap, metav1.GetOptions{})
			if err != nil {
				cp.t.Fatal(err)
			}
			return cm.Data["mode"] != "a"
		},
		undo: func() {
			if _, err := admin.Patch(ctx, winConfigMap, types.MergePatchType, []byte(`{"data":{"mode":"a"}}`), metav1.PatchOptions{}); err != nil {
				cp.t.Fatal(err)
			}
		},
	}
}

func (f *flood) start() {
	f.done, f.tried, f.taken, f.codes = make(chan struct{}), 0, nil, map[string]int{}
	for range 2 {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			for {
				select {
				case <-f.done:
					return
				default:
				}
				atomic.AddInt64(&f.tried, 1)
				f.note(f.write())
			}
		}()
	}
}

func (f *flood) note(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var why string
	switch {
	case err == nil:
		f.taken = append(f.taken, time.Now().Format(time.StampMilli))
		why = "taken"
	case strings.Contains(err.Error(), f.rule):
		why = "refused by " + f.ruleName
	case apierrors.IsForbidden(err):
		why = "refused by RBAC"
	default:
		why = fmt.Sprint(err)
		if s, ok := err.(apierrors.APIStatus); ok {
			why = fmt.Sprint(s.Status().Code, " ", s.Status().Reason)
		}
	}
	f.codes[why]++
}

// stop stops the writes and fails the test if any was taken during what
// (taken false) or none was (taken true), or if what a taken write makes
// exists when none may.
func (f *flood) stop(t *testing.T, what string, taken bool) {
	t.Helper()
	close(f.done)
	f.wg.Wait()
	f.total += f.tried
	t.Logf("%s: %d writes of %s meanwhile: %v", what, f.tried, f.who, f.codes)
	switch {
	case f.tried == 0:
		t.Errorf("%s: no write tried", what)
	case !taken && len(f.taken) > 0:
		t.Errorf("%s: %d writes of %s taken (at %v): an install window", what, len(f.taken), f.who, f.taken)
	case taken && len(f.taken) == 0:
		t.Errorf("%s: no write of %s taken without the policy (%v): the flood proves nothing", what, f.who, f.codes)
	}
	if !taken && f.made() {
		t.Errorf("%s: %s wrote what it may not", what, f.who)
	}
}

// control floods with the grant and without the policy's binding: the
// writes are taken, then the binding is put back (the policy refuses
// again) and what was written meanwhile undone; a flood before it, with
// the policy in effect, is refused by the policy itself.
func (f *flood) control(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	f.start()
	time.Sleep(time.Second)
	f.stop(t, "the grant and the policy in effect", false)
	if f.codes["refused by "+f.ruleName] == 0 {
		t.Errorf("with the grant and the policy, no write of %s was refused by %s: %v", f.who, f.ruleName, f.codes)
	}
	bindings := f.cp.client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	binding, err := bindings.Get(ctx, f.binding, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := bindings.Delete(ctx, binding.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.start()
	deadline := time.Now().Add(30 * time.Second)
	for f.takenCount() == 0 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	f.stop(t, "the control: the grant without the policy's binding", true)
	binding.ResourceVersion, binding.UID, binding.CreationTimestamp, binding.ManagedFields = "", "", metav1.Time{}, nil
	if _, err := bindings.Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, f.ruleName+" refusing "+f.who+" again", time.Minute, 100*time.Millisecond, func() (bool, string) {
		err := f.write()
		return err != nil && strings.Contains(err.Error(), f.rule), fmt.Sprint(err)
	})
	f.undo()
}

func (f *flood) takenCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.taken)
}

// deleteKustomization deletes the resources of dir's Kustomization, in
// reverse order, as `kubectl delete -k` does, as admin.
func (cp *controlPlane) deleteKustomization(dir string) {
	t := cp.t
	t.Helper()
	files := kustomizationFiles(t, dir)
	admin := cp.dynamicAs(cp.adminToken)
	for i := len(files) - 1; i >= 0; i-- {
		for _, u := range manifestObjects(t, files[i]) {
			var r dynamic.ResourceInterface = admin.Resource(resourceOf(t, u))
			if ns := u.GetNamespace(); ns != "" {
				r = admin.Resource(resourceOf(t, u)).Namespace(ns)
			}
			if err := r.Delete(context.Background(), u.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
		}
	}
}
