package placement

import (
	"context"
	"encoding/json"
	"errors"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/stickyip/stickyip/checkpointd/kube"
	"github.com/stickyip/stickyip/contract/placementv1"
)

// API is what the publisher asks of the API server about the node's own
// NodeRecord, with the node's own credentials.
type API interface {
	// Get returns the record; nil (and no error) when there is none.
	Get(ctx context.Context) (*placementv1.NodeRecord, error)
	// Publish makes the record's spec spec, creating the record when there
	// is none, and returns the record as written.
	Publish(ctx context.Context, spec placementv1.NodeRecordSpec) (*placementv1.NodeRecord, error)
}

// clientAPI is API on a client.
type clientAPI struct {
	client *kube.REST
	node   string
}

// NewAPI returns the API of node's record through client.
func NewAPI(client *kube.REST, node string) API {
	return &clientAPI{client: client, node: node}
}

// ForgetFormer removes FormerAnnotation by a merge patch of that
// annotation alone (a node may write its own Node's annotations).
func (a *clientAPI) ForgetFormer(ctx context.Context) error {
	data, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{FormerAnnotation: nil}}})
	if err != nil {
		return err
	}
	var n corev1.Node
	return a.client.Patch(ctx, kube.Nodes, "", a.node, types.MergePatchType, data, metav1.PatchOptions{FieldManager: FieldManager}, &n)
}

func (a *clientAPI) Get(ctx context.Context) (*placementv1.NodeRecord, error) {
	r, err := a.client.GetRecord(ctx, a.node)
	if apierrors.IsNotFound(err) && !resourceMissing(err) {
		return nil, nil
	}
	return r, err
}

// Publish writes the spec by a JSON merge patch of the spec alone (lists
// are replaced whole), no resourceVersion precondition: only this node
// writes the spec. A record that does not exist yet is created; one
// created meanwhile (a restart of checkpointd racing itself) is patched
// after all.
func (a *clientAPI) Publish(ctx context.Context, spec placementv1.NodeRecordSpec) (*placementv1.NodeRecord, error) {
	entries := spec.Entries
	if entries == nil {
		entries = []placementv1.Entry{} // a merge patch leaves a field it does not name: the last entry must go too
	}
	data, err := json.Marshal(map[string]any{"spec": map[string]any{"nodeUID": spec.NodeUID, "entries": entries}})
	if err != nil {
		return nil, err
	}
	for range 2 {
		r, err := a.client.PatchRecord(ctx, a.node, data, FieldManager)
		if !apierrors.IsNotFound(err) || resourceMissing(err) {
			return r, err
		}
		r, err = a.client.CreateRecord(ctx, &placementv1.NodeRecord{
			TypeMeta:   metav1.TypeMeta{APIVersion: placementv1.SchemeGroupVersion.String(), Kind: placementv1.NodeRecordKind},
			ObjectMeta: metav1.ObjectMeta{Name: a.node}, Spec: spec,
		}, FieldManager)
		if !apierrors.IsAlreadyExists(err) {
			return r, err
		}
	}
	return nil, apierrors.NewConflict(placementv1.SchemeGroupVersion.WithResource(placementv1.NodeRecordResource).GroupResource(),
		a.node, errors.New("created and deleted while written"))
}

// resourceMissing reports whether a NotFound says that the API server
// serves no NodeRecords at all (the custom resource definition is not
// installed), rather than that this record does not exist: the API
// server's answer for an unknown resource names no object.
func resourceMissing(err error) bool {
	var s apierrors.APIStatus
	if !apierrors.IsNotFound(err) || !errors.As(err, &s) {
		return false
	}
	d := s.Status().Details
	return d == nil || d.Name == ""
}
