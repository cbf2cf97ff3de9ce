package cri

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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

func (fakeRuntime) PodSandboxStatus(_ context.Context, r *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	st := &runtimeapi.PodSandboxStatus{Id: r.PodSandboxId, Annotations: map[string]string{"a": "b"}}
	info := map[string]string{}
	switch r.PodSandboxId {
	case "sb1":
		st.Network = &runtimeapi.PodSandboxNetworkStatus{Ip: "10.244.1.5", AdditionalIps: []*runtimeapi.PodIP{{Ip: "fd00::5"}}}
		info["info"] = `{"pid":42,"runtimeSpec":{"linux":{"namespaces":[{"type":"network","path":"/var/run/netns/cni-1"}]}}}`
	case "host":
		st.Linux = &runtimeapi.LinuxPodSandboxStatus{Namespaces: &runtimeapi.Namespace{Options: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE}}}
	case "bad":
		st.Network = &runtimeapi.PodSandboxNetworkStatus{Ip: "10.244.1.500"}
	case "gone":
		return nil, status.Errorf(codes.NotFound, "sandbox %q 100%% gone", r.PodSandboxId)
	}
	return &runtimeapi.PodSandboxStatusResponse{Status: st, Info: info}, nil
}

func TestStatus(t *testing.T) {
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
	st, err := c.Status(context.Background(), "sb1")
	if err != nil || len(st.IPs) != 2 || st.IPs[0] != netip.MustParseAddr("10.244.1.5") || st.IPs[1] != netip.MustParseAddr("fd00::5") ||
		st.Netns != "/var/run/netns/cni-1" || st.Pid != 42 || st.HostNetwork || st.Annotations["a"] != "b" {
		t.Fatalf("Status(sb1) = %+v, %v", st, err)
	}
	if st, err := c.Status(context.Background(), "host"); err != nil || !st.HostNetwork {
		t.Fatalf("Status(host) = %+v, %v", st, err)
	}
	if _, err := c.Status(context.Background(), "bad"); err == nil {
		t.Fatal("an address that does not parse was accepted")
	}
	// The runtime's error (a gRPC status in the headers, no message)
	// reaches the caller with its code and text.
	if _, err := c.Status(context.Background(), "gone"); err == nil || !strings.Contains(err.Error(), "NotFound") ||
		!strings.Contains(err.Error(), `sandbox "gone" 100% gone`) {
		t.Fatalf("Status(gone) = %v, want the runtime's NotFound and its message", err)
	}
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

// fullNode is a runtime with the kubelet's default 110 pods.
type fullNode struct{ fakeRuntime }

func (fullNode) ListPodSandbox(context.Context, *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	var items []*runtimeapi.PodSandbox
	for i := range 110 {
		name := fmt.Sprintf("app-%d", i)
		items = append(items, &runtimeapi.PodSandbox{Id: fmt.Sprintf("%064d", i), Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "bench", Uid: "u-" + name},
			State: runtimeapi.PodSandboxState_SANDBOX_READY, CreatedAt: time.Now().UnixNano(),
			Labels:      map[string]string{"io.kubernetes.pod.name": name, "io.kubernetes.pod.namespace": "bench", "app": "bench"},
			Annotations: map[string]string{"stickyip.io/checkpoint": "true", "io.kubernetes.cri/reserved-ip-duration": "30"}})
	}
	return &runtimeapi.ListPodSandboxResponse{Items: items}, nil
}

// BenchmarkSandboxes is one ListPodSandbox of a 110-pod node and one
// PodSandboxStatus over the runtime's unix socket, the calls of a pass (the
// per-call cost docs/DESIGN.md's "Libraries" table gives).
func BenchmarkSandboxes(b *testing.B) {
	sock := filepath.Join(b.TempDir(), "cri.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, &fullNode{})
	go srv.Serve(ln)
	b.Cleanup(srv.Stop)
	c, err := Dial(sock, 5*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for b.Loop() {
		if sbs, err := c.Sandboxes(context.Background()); err != nil || len(sbs) != 110 {
			b.Fatal(len(sbs), err)
		}
		if _, err := c.Status(context.Background(), "sb1"); err != nil {
			b.Fatal(err)
		}
	}
}
