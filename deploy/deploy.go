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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// FlannelValues is deploy/kube-flannel/values.yaml: the values that make
// flannel's own chart install stickyip's conflist.
//
//go:embed kube-flannel/values.yaml
var FlannelValues []byte

// Install decodes InstallManifest, strictly (an unknown field is an error):
// one DaemonSet and nothing else.
func Install() (*appsv1.DaemonSet, error) {
	var ds *appsv1.DaemonSet
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(InstallManifest)))
	for {
		doc, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return nil, err
		}
		switch {
		case meta.Kind == "":
			continue
		case meta.Kind == "DaemonSet" && ds == nil:
			ds = &appsv1.DaemonSet{}
			err = yaml.UnmarshalStrict(doc, ds)
		default:
			err = errors.New("unexpected object (the manifest is one DaemonSet)")
		}
		if err != nil {
			return nil, fmt.Errorf("deploy/install/stickyip.yaml: %s: %w", meta.Kind, err)
		}
	}
	if ds == nil {
		return nil, errors.New("deploy/install/stickyip.yaml: want a DaemonSet")
	}
	return ds, nil
}
