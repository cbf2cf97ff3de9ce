package placement

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
)

// API is what the publisher asks of the API server, with the node's own
// credentials.
type API interface {
	// NodeUID returns the UID of the node's Node (the shards' owner).
	NodeUID(ctx context.Context) (types.UID, error)
	// Get returns shard ns/name; a shard that does not exist is one with
	// Exists false, not an error.
	Get(ctx context.Context, ns, name string) (*Shard, error)
	// Apply makes the node's entries in shard ns/name exactly mine (server-
	// side apply under FieldManager(node)), owned by its Node (uid) while
	// mine is not empty; force takes over entries another node holds. It
	// returns the shard as written.
	Apply(ctx context.Context, ns, name string, uid types.UID, mine map[string]Hold, force bool) (*Shard, error)
}

var nodesResource = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}

// dynamicAPI is API on a dynamic client.
type dynamicAPI struct {
	client dynamic.Interface
	node   string
}

// NewAPI returns the API of node through client.
func NewAPI(client dynamic.Interface, node string) API {
	return &dynamicAPI{client: client, node: node}
}

func (a *dynamicAPI) NodeUID(ctx context.Context) (types.UID, error) {
	n, err := a.client.Resource(nodesResource).Get(ctx, a.node, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return n.GetUID(), nil
}

func (a *dynamicAPI) Get(ctx context.Context, ns, name string) (*Shard, error) {
	u, err := a.client.Resource(Resource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return &Shard{Holds: map[string]Hold{}}, nil
	}
	if err != nil {
		return nil, err
	}
	return DecodeShard(u)
}

func (a *dynamicAPI) Apply(ctx context.Context, ns, name string, uid types.UID, mine map[string]Hold, force bool) (*Shard, error) {
	u, err := a.client.Resource(Resource).Namespace(ns).Apply(ctx, name, applyConfig(ns, name, a.node, uid, mine),
		metav1.ApplyOptions{FieldManager: FieldManager(a.node), Force: force})
	if err != nil {
		return nil, err
	}
	return DecodeShard(u)
}
