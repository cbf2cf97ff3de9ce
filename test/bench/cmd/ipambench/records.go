package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/stickyip/stickyip/contract/placementv1"
	"github.com/stickyip/stickyip/deploy"
	"github.com/stickyip/stickyip/test/harness"
)

// installPlacementAPI creates the placement API's custom resource
// definitions (deploy/placement/crds.yaml), as an administrator applies
// them (unless they exist: workload 9 applies the whole of
// deploy/placement first), and waits until the API server serves
// NodeRecords: checkpointd publishes its entries there.
func installPlacementAPI(c *kubernetes.Clientset) error {
	data, err := deploy.Placement.ReadFile("placement/crds.yaml")
	if err != nil {
		return err
	}
	ctx := context.Background()
	for _, doc := range bytes.Split(data, []byte("\n---\n")) {
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return err
		}
		if err := c.Discovery().RESTClient().Post().AbsPath("/apis/apiextensions.k8s.io/v1/customresourcedefinitions").
			SetHeader("Content-Type", "application/json").Body(js).Do(ctx).Error(); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating the placement API's definitions: %w", err)
		}
	}
	return harness.Eventually(time.Minute, 200*time.Millisecond, func() error {
		_, err := c.Discovery().RESTClient().Get().AbsPath("/apis", placementv1.Group, placementv1.Version, placementv1.NodeRecordResource).DoRaw(ctx)
		return err
	})
}

// publishedPods returns the pods the node's NodeRecord names.
func publishedPods(c *kubernetes.Clientset) (map[string]bool, error) {
	raw, err := c.Discovery().RESTClient().Get().
		AbsPath("/apis", placementv1.Group, placementv1.Version, placementv1.NodeRecordResource, memNode).DoRaw(context.Background())
	if err != nil {
		return nil, err
	}
	var r placementv1.NodeRecord
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, e := range r.Spec.Entries {
		out[e.Pod] = true
	}
	return out, nil
}
