package build

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stickyip/stickyip/test/harness"
)

// checkpointd stays the size of a node agent (issue 40: 62 MB with the typed
// clientset of every API group, 19 MB without): it links the core/v1 API
// types and client-go's REST client, never the clientset, the informers of
// every group, the OpenAPI models, html/template (whose reflection keeps
// every exported method), or the gRPC library and the CRI's generated
// types (its CRI client speaks the two calls it makes over net/http), or
// the Prometheus client library with the protobuf runtime it brings (its
// metrics package writes the text format itself): of protobuf, only the
// wire encoding the CRI client reads (protowire and the two internal
// packages it uses).
func TestCheckpointdLinksCoreV1Only(t *testing.T) {
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-deps", "./checkpointd/cmd/checkpointd")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	protowire := map[string]bool{"google.golang.org/protobuf/encoding/protowire": true,
		"google.golang.org/protobuf/internal/detrand": true, "google.golang.org/protobuf/internal/errors": true}
	var bad []string
	for _, p := range strings.Fields(string(out)) {
		switch {
		case strings.HasPrefix(p, "k8s.io/api/") && p != "k8s.io/api/core/v1",
			p == "k8s.io/client-go/kubernetes", strings.HasPrefix(p, "k8s.io/client-go/kubernetes/"),
			strings.HasPrefix(p, "k8s.io/client-go/informers"), strings.HasPrefix(p, "github.com/google/gnostic-models"),
			p == "html/template", strings.HasPrefix(p, "google.golang.org/grpc"), strings.HasPrefix(p, "k8s.io/cri-api/"),
			strings.HasPrefix(p, "github.com/prometheus/"),
			strings.HasPrefix(p, "google.golang.org/protobuf/") && !protowire[p]:
			bad = append(bad, p)
		}
	}
	if len(bad) > 0 {
		t.Errorf("checkpointd links %d packages it should not (use checkpointd/apiclient, not the typed clientset; checkpointd/cri, not gRPC; checkpointd/metrics, not client_golang): %s",
			len(bad), strings.Join(bad, " "))
	}
}
