package build

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stickyip/stickyip/test/harness"
)

// checkpointd stays the size of a node agent (62 MB with the typed
// clientset of every API group, 19 MB without): it links the core/v1 API
// types and client-go's REST client, never the clientset, the informers of
// every group, the OpenAPI models, or html/template (whose reflection keeps
// every exported method; gRPC's golang.org/x/net/trace brings it unless
// built with -tags grpcnotrace, as make build builds). The maintained libraries it uses instead of code
// of its own (the Prometheus client, gRPC with the CRI's types)
// are measured within its budget (docs/DESIGN.md, "Libraries").
func TestCheckpointdLinksCoreV1Only(t *testing.T) {
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-tags", "grpcnotrace", "-deps", "./checkpointd/cmd/checkpointd") // as make build builds it
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var bad []string
	for _, p := range strings.Fields(string(out)) {
		switch {
		case strings.HasPrefix(p, "k8s.io/api/") && p != "k8s.io/api/core/v1",
			p == "k8s.io/client-go/kubernetes", strings.HasPrefix(p, "k8s.io/client-go/kubernetes/"),
			strings.HasPrefix(p, "k8s.io/client-go/informers"), strings.HasPrefix(p, "github.com/google/gnostic-models"),
			p == "html/template":
			bad = append(bad, p)
		}
	}
	if len(bad) > 0 {
		t.Errorf("checkpointd links %d packages it should not (use checkpointd/kube, not the typed clientset): %s",
			len(bad), strings.Join(bad, " "))
	}
}
