package cri

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

type fakeRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
}

func (fakeRuntime) ListPodSandbox(context.Context, *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	return &runtimeapi.ListPodSandboxResponse{Items: []*runtimeapi.PodSandbox{
		{
			Id:          "sb1",
			Metadata:    &runtimeapi.PodSandboxMetadata{Name: "web-node1", Namespace: "default", Uid: "u1"},
			State:       runtimeapi.PodSandboxState_SANDBOX_READY,
			CreatedAt:   time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano(),
			Labels:      map[string]string{"io.kubernetes.pod.name": "web-node1"},
			Annotations: map[string]string{"stickyip.io/checkpoint-of": "default/web"},
		},
		{Id: "sb2", Metadata: &runtimeapi.PodSandboxMetadata{Name: "db", Namespace: "prod", Uid: "u2"}, State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY},
	}}, nil
}

func TestSandboxesOverUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "cri.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, &fakeRuntime{})
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)

	c, err := Dial(sock, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := c.Sandboxes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d sandboxes, want 2", len(got))
	}
	a, b := got[0], got[1]
	if a.ID != "sb1" || a.Name != "web-node1" || a.Namespace != "default" || a.UID != "u1" || !a.Ready ||
		a.Annotations["stickyip.io/checkpoint-of"] != "default/web" || a.Labels["io.kubernetes.pod.name"] != "web-node1" ||
		!a.CreatedAt.Equal(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("sandbox 1 = %+v", a)
	}
	if b.Ready || b.Namespace != "prod" {
		t.Errorf("sandbox 2 = %+v, want not ready in prod", b)
	}
}

func TestRuntimeDown(t *testing.T) {
	c, err := Dial("unix://"+filepath.Join(t.TempDir(), "none.sock"), 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Sandboxes(context.Background()); err == nil {
		t.Error("no error with no runtime listening")
	}
}

func TestDialRejectsTCP(t *testing.T) {
	if _, err := Dial("tcp://127.0.0.1:1234", time.Second); err == nil {
		t.Error("tcp endpoint accepted")
	}
}
