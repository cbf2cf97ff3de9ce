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

// No install window. A node writing another node's NodeRecord as fast as
// the API server answers, during each documented install, upgrade,
// uninstall and re-install of deploy/placement (kubectl apply -k, the
// Kustomizations' files through the API, the Helm chart), gets no write
// accepted: before the nodes' grant exists RBAC refuses it, and the grant
// is applied only once the probe shows the NodeRecord policy in effect.
// The control: the same flood with the grant and without the policy's
// binding is taken, so a refusal above is the policy's or RBAC's, not a
// write that could never land. On a control plane alone.
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
	f := &flood{cp: cp, r: cp.recordsAs(cp.tokens[nodeUser(winNode)])}
	dir, nodes := placementDirs(t)
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	step := func(what string, do func()) {
		t.Helper()
		f.start()
		do()
		time.Sleep(2 * time.Second) // the node's writes go on a while after
		f.stop(t, what, false)
	}
	granted := func(want bool) {
		t.Helper()
		_, err := cp.client.RbacV1().ClusterRoleBindings().Get(ctx, nodesGrant, metav1.GetOptions{})
		if (err == nil) != want {
			t.Fatalf("the nodes' ClusterRoleBinding: %v, want it there: %v", err, want)
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
	t.Logf("%d writes of node %s on %s's record during the installs, upgrades and uninstalls: none taken", f.total, winNode, winVictim)
}

// flood is a node writing another node's record as fast as the API server
// answers: the victim's record with an entry of its own, created when
// missing, else its spec merge-patched.
type flood struct {
	cp    *controlPlane
	r     dynamic.ResourceInterface
	done  chan struct{}
	wg    sync.WaitGroup
	tried int64
	taken []string
	codes map[string]int
	mu    sync.Mutex
	total int64
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

// write makes the victim's record name the flooder's pod.
func (f *flood) write() error {
	ctx := context.Background()
	e := recordEntry("default", "web-0", "web-0", "00000000-0000-0000-0000-0000000000aa", "10.244.9.9")
	obj := recordObject(winVictim, "00000000-0000-0000-0000-0000000000bb", e)
	_, err := f.r.Patch(ctx, winVictim, types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"nodeUID":%q}}`, "00000000-0000-0000-0000-0000000000cc")), metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		_, err = f.r.Create(ctx, obj, metav1.CreateOptions{})
	}
	return err
}

func (f *flood) note(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var why string
	switch {
	case err == nil:
		f.taken = append(f.taken, time.Now().Format(time.StampMilli))
		why = "taken"
	case strings.Contains(err.Error(), "may write only its own NodeRecord"):
		why = "refused by the NodeRecord policy"
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
// (taken false) or none was (taken true), or if the victim's record exists
// when none may.
func (f *flood) stop(t *testing.T, what string, taken bool) {
	t.Helper()
	close(f.done)
	f.wg.Wait()
	f.total += f.tried
	t.Logf("%s: %d writes of node %s meanwhile: %v", what, f.tried, winNode, f.codes)
	switch {
	case f.tried == 0:
		t.Errorf("%s: no write tried", what)
	case !taken && len(f.taken) > 0:
		t.Errorf("%s: %d writes of node %s taken (at %v): an install window", what, len(f.taken), winNode, f.taken)
	case taken && len(f.taken) == 0:
		t.Errorf("%s: no write of node %s taken without the policy (%v): the flood proves nothing", what, winNode, f.codes)
	}
	if !taken && f.cp.recordOf(winVictim) != nil {
		t.Errorf("%s: %s's record exists, written by %s", what, winVictim, winNode)
	}
}

// control floods with the nodes' grant and without the NodeRecord
// policy's binding: the writes are taken, then the binding is put back
// (the probe refused again) and the record written meanwhile removed; a
// flood before it, with the policy in effect, is refused by the policy
// itself.
func (f *flood) control(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	f.start()
	time.Sleep(time.Second)
	f.stop(t, "the grant and the policy in effect", false)
	if f.codes["refused by the NodeRecord policy"] == 0 {
		t.Errorf("with the grant and the policy, no write was refused by the policy: %v", f.codes)
	}
	binding, err := f.cp.client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, "stickyip-node-records", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.cp.client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.start()
	deadline := time.Now().Add(30 * time.Second)
	for f.takenCount() == 0 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	f.stop(t, "the control: the grant without the policy's binding", true)
	binding.ResourceVersion, binding.UID, binding.CreationTimestamp, binding.ManagedFields = "", "", metav1.Time{}, nil
	if _, err := f.cp.client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.cp.waitRecordsPolicy()
	if err := f.cp.recordsAs(f.cp.adminToken).Delete(ctx, winVictim, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
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
