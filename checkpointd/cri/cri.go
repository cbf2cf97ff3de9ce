// Package cri tells checkpointd which pod sandboxes exist on the node, asking
// the container runtime over its CRI socket (containerd, CRI-O).
package cri

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

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
	rt      runtimeapi.RuntimeServiceClient
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
	conn, err := grpc.NewClient(target,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)))
	if err != nil {
		return nil, fmt.Errorf("CRI endpoint %q: %w", endpoint, err)
	}
	return &Client{conn: conn, rt: runtimeapi.NewRuntimeServiceClient(conn), timeout: timeout}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Sandboxes returns every sandbox the runtime knows, ready or not.
func (c *Client) Sandboxes(ctx context.Context) ([]Sandbox, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := c.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return nil, fmt.Errorf("CRI ListPodSandbox: %w", err)
	}
	out := make([]Sandbox, 0, len(resp.Items))
	for _, it := range resp.Items {
		s := Sandbox{
			ID:          it.Id,
			Ready:       it.State == runtimeapi.PodSandboxState_SANDBOX_READY,
			CreatedAt:   time.Unix(0, it.CreatedAt),
			Labels:      it.Labels,
			Annotations: it.Annotations,
		}
		if it.Metadata != nil {
			s.Namespace, s.Name, s.UID = it.Metadata.Namespace, it.Metadata.Name, it.Metadata.Uid
		}
		out = append(out, s)
	}
	return out, nil
}
