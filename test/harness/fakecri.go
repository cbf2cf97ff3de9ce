package harness

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// FakeCRI is a CRI runtime service that lists the sandboxes it is given and
// answers their status: the runtime as a store rebuild reads it, for the
// tiers that run no runtime (the reliability suites, the bench).
type FakeCRI struct {
	mu        sync.Mutex
	sandboxes []*runtimeapi.PodSandbox
	status    map[string]*runtimeapi.PodSandboxStatus
	srv       *grpc.Server
}

// FakeSandbox is one sandbox of a FakeCRI: a ready pod sandbox with its
// addresses (the first one primary) and network namespace.
type FakeSandbox struct {
	ID, Namespace, Name, UID string
	Annotations              map[string]string
	IPs                      []string
	Netns                    string
}

// StartFakeCRI serves a FakeCRI on the unix socket sock until Stop.
func StartFakeCRI(sock string) (*FakeCRI, error) {
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, err
	}
	f := &FakeCRI{status: map[string]*runtimeapi.PodSandboxStatus{}, srv: grpc.NewServer()}
	runtimeapi.RegisterRuntimeServiceServer(f.srv, &fakeRuntimeService{f: f})
	go func() { _ = f.srv.Serve(ln) }()
	return f, nil
}

// Stop stops serving.
func (f *FakeCRI) Stop() { f.srv.Stop() }

// Add lists a ready sandbox.
func (f *FakeCRI) Add(s FakeSandbox) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sandboxes = append(f.sandboxes, &runtimeapi.PodSandbox{Id: s.ID, State: runtimeapi.PodSandboxState_SANDBOX_READY,
		Metadata: &runtimeapi.PodSandboxMetadata{Name: s.Name, Namespace: s.Namespace, Uid: s.UID}, Annotations: s.Annotations})
	st := &runtimeapi.PodSandboxStatus{Id: s.ID, State: runtimeapi.PodSandboxState_SANDBOX_READY, Annotations: s.Annotations,
		Network: &runtimeapi.PodSandboxNetworkStatus{}}
	for i, a := range s.IPs {
		ip, _, _ := strings.Cut(a, "/")
		if i == 0 {
			st.Network.Ip = ip
		} else {
			st.Network.AdditionalIps = append(st.Network.AdditionalIps, &runtimeapi.PodIP{Ip: ip})
		}
	}
	f.status[s.ID] = st
}

// Remove stops listing sandbox id (the runtime removed it).
func (f *FakeCRI) Remove(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, sb := range f.sandboxes {
		if sb.Id == id {
			f.sandboxes = append(f.sandboxes[:i:i], f.sandboxes[i+1:]...)
			break
		}
	}
	delete(f.status, id)
}

type fakeRuntimeService struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	f *FakeCRI
}

func (s *fakeRuntimeService) ListPodSandbox(context.Context, *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	return &runtimeapi.ListPodSandboxResponse{Items: s.f.sandboxes}, nil
}

func (s *fakeRuntimeService) PodSandboxStatus(_ context.Context, r *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	return &runtimeapi.PodSandboxStatusResponse{Status: s.f.status[r.PodSandboxId]}, nil
}

// WriteCNIResult writes, in dir, the CNI result cache file libcni writes
// after an ADD of sandbox s to network on interface eth0 with CNI_ARGS args
// (its format: kind cniCacheV1, the pod's annotations as the capability
// argument, the result's addresses with their prefix length).
func WriteCNIResult(dir, network string, s FakeSandbox, args string) error {
	var pairs [][2]string
	for _, kv := range strings.Split(args, ";") {
		k, v, _ := strings.Cut(kv, "=")
		pairs = append(pairs, [2]string{k, v})
	}
	var addrs []any
	for _, a := range s.IPs {
		if !strings.Contains(a, "/") { // a result's addresses carry their prefix
			a += map[bool]string{true: "/128", false: "/32"}[strings.Contains(a, ":")]
		}
		addrs = append(addrs, map[string]any{"address": a})
	}
	b, err := json.Marshal(map[string]any{"kind": "cniCacheV1", "containerId": s.ID, "ifName": "eth0", "networkName": network,
		"netns": s.Netns, "cniArgs": pairs, "capabilityArgs": map[string]any{"io.kubernetes.cri.pod-annotations": s.Annotations},
		"result": map[string]any{"cniVersion": "1.0.0", "ips": addrs}})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, network+"-"+s.ID+"-eth0"), b, 0o600)
}
