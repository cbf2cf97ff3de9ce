// Package cri tells checkpointd which pod sandboxes exist on the node, asking
// the container runtime over its CRI socket (containerd, CRI-O) with gRPC
// and the CRI's own types (k8s.io/cri-api, runtime.v1).
package cri

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/stickyip/stickyip/checkpointd/formats"
)

// maxMessage bounds a runtime's answer, as the kubelet bounds it (a
// ListPodSandbox of a full node with its labels and annotations is far
// smaller).
const maxMessage = 16 << 20

// Sandbox is one pod sandbox known to the runtime.
type Sandbox struct {
	ID          string
	Namespace   string
	Name        string
	UID         string
	Ready       bool
	CreatedAt   time.Time
	Labels      map[string]string
	Annotations map[string]string
}

// Client lists sandboxes through a CRI runtime service.
type Client struct {
	conn    *grpc.ClientConn
	rs      runtimeapi.RuntimeServiceClient
	timeout time.Duration
}

// Dial connects to endpoint ("unix:///run/containerd/containerd.sock" or a
// bare socket path). The connection is lazy: errors show up on the first call.
func Dial(endpoint string, timeout time.Duration) (*Client, error) {
	target := endpoint
	if strings.HasPrefix(target, "/") {
		target = "unix://" + target
	}
	if !strings.HasPrefix(target, "unix://") {
		return nil, fmt.Errorf("CRI endpoint %q: only unix sockets are supported", endpoint)
	}
	if strings.TrimPrefix(target, "unix://") == "" {
		return nil, fmt.Errorf("CRI endpoint %q: no socket path", endpoint)
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessage)))
	if err != nil {
		return nil, fmt.Errorf("CRI endpoint %q: %w", endpoint, err)
	}
	return &Client{conn: conn, rs: runtimeapi.NewRuntimeServiceClient(conn), timeout: timeout}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Sandboxes returns every sandbox the runtime knows, ready or not.
func (c *Client) Sandboxes(ctx context.Context) ([]Sandbox, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := c.rs.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return nil, fmt.Errorf("CRI ListPodSandbox: %w", err)
	}
	out := make([]Sandbox, 0, len(resp.Items))
	for _, it := range resp.Items {
		md := it.GetMetadata()
		out = append(out, Sandbox{ID: it.Id, Namespace: md.GetNamespace(), Name: md.GetName(), UID: md.GetUid(),
			Ready: it.State == runtimeapi.PodSandboxState_SANDBOX_READY, CreatedAt: time.Unix(0, it.CreatedAt),
			Labels: it.Labels, Annotations: it.Annotations})
	}
	return out, nil
}

// Status is what the runtime says of one sandbox beyond its listing.
type Status struct {
	// IPs are the addresses of the sandbox's primary network (the CRI's
	// PodSandboxNetworkStatus: ip, then the additional ones).
	IPs []netip.Addr
	// HostNetwork: the sandbox uses the node's network namespace (no CNI).
	HostNetwork bool
	// Annotations are the pod's annotations as the sandbox was created with.
	Annotations map[string]string
	// Netns is the sandbox's network namespace path from the runtime's
	// verbose information ("" when it gives none).
	Netns string
	// Pid is the sandbox's pause process (0: unknown).
	Pid int
}

// Status asks the runtime about sandbox id (verbose, for its network
// namespace). Addresses that do not parse are an error: the caller must
// not take an unreadable answer for "no address".
func (c *Client) Status(ctx context.Context, id string) (Status, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := c.rs.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true})
	if err != nil {
		return Status{}, fmt.Errorf("CRI PodSandboxStatus %s: %w", id, err)
	}
	st := resp.GetStatus()
	if st == nil {
		return Status{}, fmt.Errorf("CRI PodSandboxStatus %s: no status", id)
	}
	out := Status{Annotations: st.Annotations,
		HostNetwork: st.GetLinux().GetNamespaces().GetOptions().GetNetwork() == runtimeapi.NamespaceMode_NODE}
	addrs := []string{st.GetNetwork().GetIp()}
	for _, a := range st.GetNetwork().GetAdditionalIps() {
		addrs = append(addrs, a.GetIp())
	}
	for _, a := range addrs {
		if a == "" {
			continue
		}
		ip, err := netip.ParseAddr(a)
		if err != nil {
			return Status{}, fmt.Errorf("CRI PodSandboxStatus %s: address %q: %w", id, a, err)
		}
		out.IPs = append(out.IPs, ip.Unmap())
	}
	if v, ok := resp.Info[formats.SandboxInfoKey]; ok {
		in, err := formats.ParseSandboxInfo(v)
		if err != nil {
			return Status{}, fmt.Errorf("CRI PodSandboxStatus %s: %w", id, err)
		}
		out.Netns, out.Pid = in.Netns, in.Pid
	}
	return out, nil
}
