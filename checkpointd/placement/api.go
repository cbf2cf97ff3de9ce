package placement

import (
	"context"
	"encoding/json"

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
	// Write makes the node's value in shard ns/name value, and its
	// ownerReference the one to its Node (uid), dropping those to stale
	// UIDs; an empty value removes its key and its ownerReferences. rv is
	// the shard's resourceVersion as last read, which the write requires
	// ("": the shard does not exist, and is created). It returns the shard
	// as written.
	Write(ctx context.Context, ns, name, rv string, uid types.UID, stale []types.UID, value string) (*Shard, error)
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

func (a *clientAPI) Write(ctx context.Context, ns, name, rv string, uid types.UID, stale []types.UID, value string) (*Shard, error) {
	var cm corev1.ConfigMap
	if rv == "" {
		opts := metav1.CreateOptions{FieldManager: FieldManager(a.node)}
		if err := a.client.Create(ctx, apiclient.ConfigMaps, ns, newShard(ns, name, a.node, uid, value), opts, &cm); err != nil {
			return nil, err
		}
		return DecodeShard(&cm), nil
	}
	patch, err := shardPatch(name, rv, a.node, uid, stale, value)
	if err != nil {
		return nil, err
	}
	opts := metav1.PatchOptions{FieldManager: FieldManager(a.node)}
	if err := a.client.Patch(ctx, apiclient.ConfigMaps, ns, name, types.StrategicMergePatchType, patch, opts, &cm); err != nil {
		return nil, err
	}
	return DecodeShard(&cm), nil
}

// newShard is shard ns/name as node creates it, holding its value.
func newShard(ns, name, node string, uid types.UID, value string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{IndexLabel: shardNumber(name)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node, UID: uid}}},
		Data: map[string]string{node: value},
	}
}

// shardPatch is the strategic merge patch of node's value in shard name, on
// resourceVersion rv: its key set (or, for an empty value, removed) and its
// ownerReference added (or removed) by UID, the list's merge key, so that
// no other node's key or ownerReference is touched, whoever manages them.
func shardPatch(name, rv, node string, uid types.UID, stale []types.UID, value string) ([]byte, error) {
	var refs []map[string]any
	for _, u := range stale {
		refs = append(refs, map[string]any{"$patch": "delete", "uid": u})
	}
	var data any = value
	if value == "" {
		data = nil
		refs = append(refs, map[string]any{"$patch": "delete", "uid": uid})
	} else {
		refs = append(refs, map[string]any{"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid})
	}
	return json.Marshal(map[string]any{
		"metadata": map[string]any{
			"resourceVersion": rv,
			"labels":          map[string]string{IndexLabel: shardNumber(name)},
			"ownerReferences": refs,
		},
		"data": map[string]any{node: data},
	})
}
