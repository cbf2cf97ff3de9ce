package placement

import (
	"context"
	"encoding/json"
	"errors"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/stickyip/stickyip/checkpointd/apiclient"
)

// API is what the publisher asks of the API server, with the node's own
// credentials.
type API interface {
	// NodeUID returns the UID of the node's Node (the shards' owner).
	NodeUID(ctx context.Context) (types.UID, error)
	// Get returns shard ns/name; a shard that does not exist is one with
	// Exists false, not an error.
	Get(ctx context.Context, ns, name string) (*Shard, error)
	// Write makes change to shard ns/name, creating it when it does not
	// exist, with no resourceVersion precondition: the API server applies
	// concurrent writes of several nodes one after the other, and the index
	// policy checks each against the shard as it is then, so no other node's
	// write can make it fail. It returns the shard as written.
	Write(ctx context.Context, ns, name string, change Change) (*Shard, error)
	// Listed returns the value of the node's Node's ShardsAnnotation (""
	// when it has none).
	Listed(ctx context.Context) (string, error)
	// List sets it ("": removes it), by a merge patch of that annotation
	// only.
	List(ctx context.Context, value string) error
}

// Change is one write of a node to a shard.
type Change struct {
	// Value is the node's whole value; "" removes its key and its
	// ownerReference.
	Value string
	// UID is the node's Node's UID: its ownerReference's.
	UID types.UID
	// Stale are the UIDs of the node's own references to a former Node of
	// its name (deleted and registered again), which the write removes
	// (Shard.StaleOwn).
	Stale []types.UID
}

// clientAPI is API on a client.
type clientAPI struct {
	client *apiclient.Client
	node   string
}

// NewAPI returns the API of node through client.
func NewAPI(client *apiclient.Client, node string) API {
	return &clientAPI{client: client, node: node}
}

func (a *clientAPI) NodeUID(ctx context.Context) (types.UID, error) {
	var n corev1.Node
	if err := a.client.Get(ctx, apiclient.Nodes, "", a.node, &n); err != nil {
		return "", err
	}
	return n.UID, nil
}

func (a *clientAPI) Listed(ctx context.Context) (string, error) {
	var n corev1.Node
	if err := a.client.Get(ctx, apiclient.Nodes, "", a.node, &n); err != nil {
		return "", err
	}
	return n.Annotations[ShardsAnnotation], nil
}

func (a *clientAPI) List(ctx context.Context, value string) error {
	v := any(value)
	if value == "" {
		v = nil
	}
	data, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{ShardsAnnotation: v}}})
	if err != nil {
		return err
	}
	var n corev1.Node
	return a.client.Patch(ctx, apiclient.Nodes, "", a.node, types.MergePatchType, data, metav1.PatchOptions{FieldManager: FieldManager}, &n)
}

func (a *clientAPI) Get(ctx context.Context, ns, name string) (*Shard, error) {
	var cm corev1.ConfigMap
	err := a.client.Get(ctx, apiclient.ConfigMaps, ns, name, &cm)
	if apierrors.IsNotFound(err) {
		return &Shard{Values: map[string]string{}}, nil
	}
	if err != nil {
		return nil, err
	}
	return DecodeShard(&cm), nil
}

// Write sets the node's value by a strategic-merge patch of its key and of
// its reference (merged by UID, the list's key; a former Node's removed by
// UID), creating the shard when there is none (another node creating it
// meanwhile: patched after all); removes them by one too. Never a
// precondition: whatever other nodes write meanwhile, the write is checked
// against the shard as it is then. Not server-side apply: it keeps a
// managedFields entry per field manager, which every node would need
// (FieldManager).
func (a *clientAPI) Write(ctx context.Context, ns, name string, c Change) (*Shard, error) {
	opts := metav1.PatchOptions{FieldManager: FieldManager}
	var body any
	if c.Value == "" {
		body = releasePatch(a.node, append([]types.UID{c.UID}, c.Stale...))
	} else {
		body = setPatch(name, a.node, c)
	}
	data, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	for range 2 {
		var cm corev1.ConfigMap
		err := a.client.Patch(ctx, apiclient.ConfigMaps, ns, name, types.StrategicMergePatchType, data, opts, &cm)
		switch {
		case apierrors.IsNotFound(err) && c.Value == "":
			return &Shard{Values: map[string]string{}}, nil // nothing left to remove
		case apierrors.IsNotFound(err):
			err = a.client.Create(ctx, apiclient.ConfigMaps, ns, newShard(ns, name, a.node, c), metav1.CreateOptions{FieldManager: FieldManager}, &cm)
			if apierrors.IsAlreadyExists(err) {
				continue // created meanwhile: patch it
			}
		}
		if err != nil {
			return nil, err
		}
		return DecodeShard(&cm), nil
	}
	return nil, apierrors.NewConflict(corev1.Resource("configmaps"), name, errors.New("created and deleted while written"))
}

// ownRef is node's ownerReference to its Node.
func ownRef(node string, uid types.UID) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: node, UID: uid}
}

// newShard is shard ns/name created by node with its value.
func newShard(ns, name, node string, c Change) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{IndexLabel: shardNumber(name)},
			OwnerReferences: []metav1.OwnerReference{ownRef(node, c.UID)}},
		Data: map[string]string{node: c.Value},
	}
}

// setPatch is the strategic merge patch that makes node's key value, adds
// its reference (merged by UID) and removes its references to a former
// Node of its name (by UID): no other node's key or reference is touched.
func setPatch(name, node string, c Change) map[string]any {
	refs := []any{ownRef(node, c.UID)}
	for _, uid := range c.Stale {
		refs = append(refs, map[string]any{"$patch": "delete", "uid": uid})
	}
	return map[string]any{
		"metadata": map[string]any{
			"labels":          map[string]string{IndexLabel: shardNumber(name)},
			"ownerReferences": refs,
		},
		"data": map[string]any{node: c.Value},
	}
}

// releasePatch is the strategic merge patch that removes node's key and its
// ownerReferences of uids (by UID, the list's merge key): no other node's
// key or reference is touched.
func releasePatch(node string, uids []types.UID) map[string]any {
	var refs []map[string]any
	for _, uid := range uids {
		refs = append(refs, map[string]any{"$patch": "delete", "uid": uid})
	}
	return map[string]any{
		"metadata": map[string]any{"ownerReferences": refs},
		"data":     map[string]any{node: nil},
	}
}
