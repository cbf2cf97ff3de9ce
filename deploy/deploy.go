// Package deploy holds the manifests an operator applies: install/ (`kubectl
// apply -f deploy/install/`: the installer DaemonSet, in kube-system,
// rendered from the Helm chart helm/stickyip) and kube-flannel/ (the patch
// of kube-flannel's CNI config, and the values for flannel's own chart). Go
// code reads them from here (embedded), so the tests check the files
// operators get.
package deploy

import (
	"bufio"
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io"

	appsv1 "k8s.io/api/apps/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// InstallManifest is deploy/install/stickyip.yaml.
//
//go:embed install/stickyip.yaml
var InstallManifest []byte

// FlannelPatch is deploy/kube-flannel/cni-conf-patch.yaml.
//
//go:embed kube-flannel/cni-conf-patch.yaml
var FlannelPatch []byte

// NewStoreWait is the ipam.newStoreWait of the conflist in FlannelPatch and
// FlannelValues, which is otherwise conf/10-flannel-stickyip.conflist: the
// nodes of a cluster installed with deploy/install run checkpointd, which
// reads a re-installed node's placement entries before its first address
// is handed out (a node set up by hand from conf/ may not).
const NewStoreWait = "2m"

// FlannelValues is deploy/kube-flannel/values.yaml: the values that make
// flannel's own chart install stickyip's conflist.
//
//go:embed kube-flannel/values.yaml
var FlannelValues []byte

// Install decodes InstallManifest, strictly (an unknown field is an error):
// one DaemonSet and nothing else.
func Install() (*appsv1.DaemonSet, error) {
	var ds *appsv1.DaemonSet
	err := eachObject(InstallManifest, func(kind, _ string, doc []byte) error {
		if kind != "DaemonSet" || ds != nil {
			return fmt.Errorf("%s: unexpected object (the manifest is one DaemonSet)", kind)
		}
		ds = &appsv1.DaemonSet{}
		if err := yaml.UnmarshalStrict(doc, ds); err != nil {
			return fmt.Errorf("%s: %w", kind, err)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("deploy/install/stickyip.yaml: %w", err)
	}
	if ds == nil {
		return nil, errors.New("deploy/install/stickyip.yaml: want a DaemonSet")
	}
	return ds, nil
}

// eachObject calls fn with the kind, the name and the text of each object
// of the multi-document YAML stream data, in order; a document without a
// kind (comments only) is skipped. It stops at fn's first error.
func eachObject(data []byte, fn func(kind, name string, doc []byte) error) error {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		var head struct {
			Kind     string
			Metadata struct{ Name string }
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			return err
		}
		if head.Kind == "" {
			continue
		}
		if err := fn(head.Kind, head.Metadata.Name, doc); err != nil {
			return err
		}
	}
}
