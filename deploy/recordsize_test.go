package deploy

import (
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/stickyip/stickyip/contract/placementv1"
)

// etcdRequestLimit is etcd's default --max-request-bytes: an object is
// written whole, its status with its spec.
const etcdRequestLimit = 1536 * 1024

// recordMetadataRoom is what is left for a record's metadata (its name,
// the API server's own fields) beside the largest spec and status.
const recordMetadataRoom = 32 * 1024

// The largest NodeRecord the CRD's schema admits — every entry and every
// verdict at its maxItems, every string at its maxLength — fits etcd's
// request limit with its status: a record the API server takes but whose
// status cannot be written would lose its verdicts (and with them what
// keeps its pods' reservations), and a controller restart the claims of
// pods already gone.
func TestLargestRecordFitsWithItsStatus(t *testing.T) {
	crd := doc[*unstructured.Unstructured](t, placementDocs(t), "CustomResourceDefinition/"+placementv1.NodeRecordResource+"."+placementv1.Group)
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	schema, _, _ := unstructured.NestedMap(versions[0].(map[string]any), "schema", "openAPIV3Schema")
	props, _, _ := unstructured.NestedMap(schema, "properties")
	largest := map[string]any{}
	for _, part := range []string{"spec", "status"} {
		largest[part] = fill(t, part, props[part].(map[string]any))
	}
	b, err := json.Marshal(largest)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the largest record's spec and status: %d bytes (etcd takes %d, %d kept for metadata)", len(b), etcdRequestLimit, recordMetadataRoom)
	if len(b) > etcdRequestLimit-recordMetadataRoom {
		t.Fatalf("the largest record the schema admits is %d bytes of spec and status: over etcd's %d less %d for metadata; lower maxItems or a maxLength",
			len(b), etcdRequestLimit, recordMetadataRoom)
	}
	items, _, _ := unstructured.NestedInt64(props, "spec", "properties", "entries", "maxItems")
	if items != placementv1.MaxEntries {
		t.Fatalf("the CRD's maxItems %d is not placementv1.MaxEntries %d (what the publisher keeps)", items, placementv1.MaxEntries)
	}
}

// fill returns the largest value the schema s admits at path: strings at
// their maxLength (date-times at their form's length), arrays at their
// maxItems, every property set. A string or array without a bound fails
// the test: the size would be unbounded.
func fill(t *testing.T, path string, s map[string]any) any {
	t.Helper()
	switch s["type"] {
	case "object":
		out := map[string]any{}
		props, _ := s["properties"].(map[string]any)
		for k, p := range props {
			out[k] = fill(t, path+"."+k, p.(map[string]any))
		}
		return out
	case "array":
		n, ok := s["maxItems"].(int64)
		if !ok {
			t.Fatalf("%s: an array without maxItems", path)
		}
		out := make([]any, n)
		for i := range out {
			out[i] = fill(t, path+"[]", s["items"].(map[string]any))
		}
		return out
	case "string":
		if s["format"] == "date-time" {
			return "2026-12-07T12:00:00Z"
		}
		if e, ok := s["enum"].([]any); ok {
			longest := ""
			for _, v := range e {
				if v.(string) != "" && len(v.(string)) > len(longest) {
					longest = v.(string)
				}
			}
			return longest
		}
		n, ok := s["maxLength"].(int64)
		if !ok {
			t.Fatalf("%s: a string without maxLength", path)
		}
		return strings.Repeat("x", int(n))
	case "integer":
		return int64(1) << 62
	case "boolean":
		return true
	}
	t.Fatalf("%s: type %v", path, s["type"])
	return nil
}
