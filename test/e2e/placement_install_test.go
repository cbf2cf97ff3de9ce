//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
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
	"k8s.io/client-go/kubernetes"

	"github.com/stickyip/stickyip/checkpointd/placement"
	"github.com/stickyip/stickyip/test/harness"
)

// Issue 47, 4: no install window. A node writing the index as fast as the
// API server answers, during each documented install, upgrade, uninstall
// and re-install of the placement policies (kubectl apply -k, kubectl
// apply -f, the Helm chart), gets no write accepted: before the nodes'
// RBAC exists RBAC refuses it, and the RBAC is applied only once a dry run
// shows the index policy in effect (docs/install.md). Its write is a line
// the hint would count (well formed, its seq under the shard's
// resourceVersion) for a pod that never ran, which the index policy
// refuses. On a control plane alone (no node runs anything).
const (
	winNS   = "win"
	winNode = "flooder"
)

func TestPlacementInstallWindow(t *testing.T) {
	bins := findBins(t)
	netns, h := newNetns(t, "win")
	cp := newControlPlane(t, bins, harness.ShortTempDir(t), testLogDir(t), netns, h, "127.0.0.1", winNode)
	cp.startControlPlane()
	cp.ensureNamespace(winNS)
	ctx := context.Background()
	nd, err := cp.client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: winNode}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f := newFlood(cp, nd.UID)
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "deploy", "placement")
	nodes := filepath.Join(dir, "nodes")
	step := func(what string, do func()) {
		t.Helper()
		f.start()
		do()
		time.Sleep(2 * time.Second) // the nodes' writes go on a while after
		f.stop(t, what)
	}
	granted := func(want bool) {
		t.Helper()
		_, err := cp.client.RbacV1().ClusterRoleBindings().Get(ctx, "stickyip:placement-publisher", metav1.GetOptions{})
		if (err == nil) != want {
			t.Fatalf("the nodes' ClusterRoleBinding: %v, want it there: %v", err, want)
		}
	}
	if cp.kubectlPath() != "" {
		for _, how := range []string{"-k", "-f"} {
			step("kubectl apply "+how+" deploy/placement, the dry run refused, kubectl apply "+how+" deploy/placement/nodes", func() {
				cp.kubectl("apply", how, dir)
				granted(false)
				t.Logf("kubectl apply %s: the index policy in effect after %v", how, cp.waitIndexPolicy().Round(time.Millisecond))
				cp.kubectl("apply", how, nodes)
				granted(true)
			})
			step("kubectl apply "+how+" again (an upgrade)", func() { cp.kubectl("apply", how, dir); cp.kubectl("apply", how, nodes) })
			step("kubectl delete "+how+" deploy/placement/nodes, then deploy/placement", func() {
				cp.kubectl("delete", how, nodes)
				cp.kubectl("delete", how, dir)
				granted(false)
			})
		}
	} else {
		step("the files of deploy/placement applied, the dry run refused, those of deploy/placement/nodes", func() {
			cp.applyFiles(dir)
			granted(false)
			t.Logf("the index policy in effect after %v", cp.waitIndexPolicy().Round(time.Millisecond))
			cp.applyFiles(nodes)
			granted(true)
		})
		step("deploy/placement/nodes deleted, then deploy/placement", func() {
			cp.deleteFiles(nodes)
			cp.deleteFiles(dir)
			granted(false)
		})
	}
	chart := filepath.Join(root, "deploy", "helm", "stickyip")
	for _, round := range []string{"install", "re-install"} {
		step("helm "+round+" with placement.enabled, the dry run refused (NOTES), helm upgrade --reuse-values", func() {
			out := cp.helm("install", stickyipRelease, chart, "-n", "kube-system", "--set", "placement.enabled=true")
			granted(false)
			if !strings.Contains(out, "stickyip-placement-probe") {
				t.Errorf("helm install's NOTES do not say how to see the index policy in effect:\n%s", out)
			}
			t.Logf("helm %s: the index policy in effect after %v", round, cp.waitIndexPolicy().Round(time.Millisecond))
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
	t.Logf("%d writes of node %s during the installs, upgrades and uninstalls: none taken", f.total, winNode)
}

// flood is a node writing the index as fast as the API server answers: a
// line for web-0 (a pod that never ran), its own reference, in the shard
// of web-0, created when missing.
type flood struct {
	cp    *controlPlane
	c     kubernetes.Interface
	uid   types.UID
	done  chan struct{}
	wg    sync.WaitGroup
	tried int64
	taken []string
	codes map[string]int
	mu    sync.Mutex
	total int64
}

func newFlood(cp *controlPlane, uid types.UID) *flood {
	return &flood{cp: cp, c: cp.clientAs(cp.tokens[nodeUser(winNode)]), uid: uid}
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

// write makes the node's line for web-0, as the publisher would.
func (f *flood) write() error {
	ctx := context.Background()
	shard := placement.ShardOf("web-0")
	line := "web-0 web-0 1 2026-11-25T00:00:00.000Z - 10.244.9.9"
	body, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"labels": map[string]string{placement.IndexLabel: shard[len(placement.ShardPrefix):]},
			"ownerReferences": []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: winNode, UID: f.uid}}},
		"data": map[string]string{winNode: line}})
	cms := f.c.CoreV1().ConfigMaps(winNS)
	_, err := cms.Patch(ctx, shard, types.StrategicMergePatchType, body, metav1.PatchOptions{FieldManager: placement.FieldManager})
	if apierrors.IsNotFound(err) {
		_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: shard, Namespace: winNS,
			Labels:          map[string]string{placement.IndexLabel: shard[len(placement.ShardPrefix):]},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: winNode, UID: f.uid}}},
			Data: map[string]string{winNode: line}}, metav1.CreateOptions{FieldManager: placement.FieldManager})
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
	case strings.Contains(err.Error(), "ValidatingAdmissionPolicy 'stickyip-placement-index'"):
		why = "refused by the index policy"
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

// stop stops the writes and fails the test if any was taken during what,
// or the index holds the node's line.
func (f *flood) stop(t *testing.T, what string) {
	t.Helper()
	close(f.done)
	f.wg.Wait()
	f.total += f.tried
	t.Logf("%s: %d writes of node %s meanwhile: %v", what, f.tried, winNode, f.codes)
	if len(f.taken) > 0 {
		t.Errorf("%s: %d writes of node %s taken (at %v): an install window", what, len(f.taken), winNode, f.taken)
	}
	for key, s := range f.cp.shardsIn(winNS) {
		if v, ok := s.Values[winNode]; ok {
			t.Errorf("%s: %s holds %s's line %q", what, key, winNode, v)
		}
	}
}

// deleteFiles deletes the objects of every *.yaml file of dir, as `kubectl
// delete -f dir` does, as admin.
func (cp *controlPlane) deleteFiles(dir string) {
	t := cp.t
	t.Helper()
	files := manifestFiles(t, dir)
	admin := cp.dynamicAs(cp.adminToken)
	for _, f := range files {
		for _, u := range manifestObjects(t, f) {
			if err := admin.Resource(resourceOf(t, u)).Delete(context.Background(), u.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
		}
	}
}
