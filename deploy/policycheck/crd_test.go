package policycheck

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/stickyip/stickyip/contract/placementv1"
)

// crdValidators decodes deploy/placement/crds.yaml strictly, checks each
// CRD as the API server checks one at its creation (the structural schema
// included), and returns a validator of each kind's objects by the CRD's
// schema, as the API server validates a custom resource it is given.
func crdValidators(t *testing.T) map[string]validation.SchemaValidator {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(placementDir, "crds.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]validation.SchemaValidator{}
	for _, doc := range splitYAML(t, data) {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(doc, crd); err != nil {
			t.Fatal(err)
		}
		apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(crd)
		internal := &apiextensions.CustomResourceDefinition{}
		if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(crd, internal, nil); err != nil {
			t.Fatal(err)
		}
		internal.Status.StoredVersions = []string{placementv1.Version} // as the API server's create sets it
		if errs := crdvalidation.ValidateCustomResourceDefinition(context.Background(), internal); len(errs) > 0 {
			t.Errorf("CRD %s: the API server refuses it: %v", crd.Name, errs.ToAggregate())
		}
		schema := internal.Spec.Validation // the internal form holds a schema all versions share here
		if schema == nil {
			schema = internal.Spec.Versions[0].Schema
		}
		v, _, err := validation.NewSchemaValidator(schema.OpenAPIV3Schema)
		if err != nil {
			t.Fatal(err)
		}
		out[crd.Spec.Names.Kind] = v
	}
	return out
}

func splitYAML(t *testing.T, data []byte) [][]byte {
	t.Helper()
	var out [][]byte
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		d, err := r.Read()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		var head struct{ Kind string }
		if err := yaml.Unmarshal(d, &head); err != nil {
			t.Fatal(err)
		}
		if head.Kind != "" {
			out = append(out, d)
		}
	}
}

// The CRD is one the API server takes, and every NodeRecord and shard the
// cases hold is one it stores: the probe (a schema error would answer its
// dry run before the policy could refuse it), the records nodes write in
// the cases, the largest record and the largest shards the cost cases
// read (a ConfigMap's keys, and its 1 MiB, as the API server checks them).
func TestCRDsTakeTheInputs(t *testing.T) {
	validators := crdValidators(t)
	cms := 0
	check := func(what string, raw []byte) {
		t.Helper()
		if len(raw) == 0 || string(raw) == "null" {
			return
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(raw); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if u.GetKind() == "ConfigMap" {
			data, _, _ := unstructured.NestedStringMap(u.Object, "data")
			size := 0
			for k, v := range data {
				for _, msg := range utilvalidation.IsConfigMapKey(k) {
					t.Errorf("%s: the API server refuses the key %.40q of ConfigMap %s: %s", what, k, u.GetName(), msg)
				}
				size += len(k) + len(v)
			}
			if size > 1<<20 {
				t.Errorf("%s: ConfigMap %s holds %d bytes, over the API server's 1 MiB", what, u.GetName(), size)
			}
			cms++
			return
		}
		v, ok := validators[u.GetKind()]
		if !ok {
			return // another built-in kind
		}
		if errs := validation.ValidateCustomResource(nil, u.Object, v); len(errs) > 0 {
			t.Errorf("%s: the API server refuses this %s: %v", what, u.GetKind(), errs.ToAggregate())
		}
	}
	probe, err := os.ReadFile(filepath.Join(placementDir, "probe.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(probe)
	if err != nil {
		t.Fatal(err)
	}
	check("probe.yaml", j)
	n := 0
	for _, c := range loadCases(t) {
		for _, r := range append([]json.RawMessage{c.Object, c.OldObject}, c.Params...) {
			check(c.Name, r)
			n++
		}
		for _, f := range append([]string{c.ObjectFile, c.OldObjectFile}, c.ParamFiles...) {
			if f != "" {
				check(c.Name+": "+f, readTestdata(t, f))
				n++
			}
		}
	}
	if len(validators) != 1 || n < 50 || cms < 10 {
		t.Fatalf("%d CRDs, %d objects checked, %d ConfigMaps", len(validators), n, cms)
	}
}
