package manager

import (
	"context"
	"fmt"
	"log/slog"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/controller/api"
)

// Run connects to the API server of cfg (its kubeconfig, or the pod's
// in-cluster configuration) and runs the controller (Manager.Run).
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	rc, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	if err != nil {
		return fmt.Errorf("--kubeconfig %q: %w", cfg.Kubeconfig, err)
	}
	rc.QPS, rc.Burst = cfg.QPS, cfg.Burst
	rc.UserAgent = "stickyip-controller/" + contract.Version
	// Pods, Nodes and StatefulSets in protobuf, as the control plane's own
	// controllers read them: the pod list is the largest the controller
	// reads.
	kc := rest.CopyConfig(rc)
	kc.ContentType = runtime.ContentTypeProtobuf
	kc.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	kube, err := kubernetes.NewForConfig(kc)
	if err != nil {
		return err
	}
	placement, err := api.New(rc)
	if err != nil {
		return err
	}
	m, err := New(cfg, Clients{Kube: kube, Placement: placement}, log)
	if err != nil {
		return err
	}
	return m.Run(ctx)
}
