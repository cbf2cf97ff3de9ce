package placement

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
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

// clientAPI is API on a client.
type clientAPI struct {
	client kubernetes.Interface
	node   string
}

// NewAPI returns the API of node through client.
func NewAPI(client kubernetes.Interface, node string) API {
	return &clientAPI{client: client, node: node}
}

func (a *clientAPI) NodeUID(ctx context.Context) (types.UID, error) {
	n, err := a.client.CoreV1().Nodes().Get(ctx, a.node, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return n.UID, nil
}

func (a *clientAPI) Get(ctx context.Context, ns, name string) (*Shard, error) {
	cm, err := a.client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return &Shard{Holds: map[string]Hold{}}, nil
	}
	if err != nil {
		return nil, err
	}
	return DecodeShard(cm)
}

func (a *clientAPI) Apply(ctx context.Context, ns, name string, uid types.UID, mine map[string]Hold, force bool) (*Shard, error) {
	cm, err := a.client.CoreV1().ConfigMaps(ns).Apply(ctx, applyConfig(ns, name, a.node, uid, mine),
		metav1.ApplyOptions{FieldManager: FieldManager(a.node), Force: force})
	if err != nil {
		return nil, err
	}
	return DecodeShard(cm)
}
