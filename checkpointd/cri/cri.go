// Package cri tells checkpointd which pod sandboxes exist on the node, asking
// the container runtime over its CRI socket (containerd, CRI-O).
package cri

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/stickyip/stickyip/checkpointd/sandboxinfo"
)

// The CRI's runtime service (k8s.io/cri-api, runtime.v1) and the calls
// checkpointd makes.
const (
	listPodSandbox   = "/runtime.v1.RuntimeService/ListPodSandbox"
	podSandboxStatus = "/runtime.v1.RuntimeService/PodSandboxStatus"
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
	tr      *http.Transport
	hc      *http.Client
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
	socket := strings.TrimPrefix(target, "unix://")
	if socket == "" {
		return nil, fmt.Errorf("CRI endpoint %q: no socket path", endpoint)
	}
	tr := transport(socket)
	return &Client{tr: tr, hc: &http.Client{Transport: tr}, timeout: timeout}, nil
}

// Close closes the connection.
func (c *Client) Close() error {
	c.tr.CloseIdleConnections()
	return nil
}

// Sandboxes returns every sandbox the runtime knows, ready or not.
func (c *Client) Sandboxes(ctx context.Context) ([]Sandbox, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := c.unary(ctx, listPodSandbox, nil)
	if err != nil {
		return nil, fmt.Errorf("CRI ListPodSandbox: %w", err)
	}
	out, err := decodeSandboxes(resp)
	if err != nil {
		return nil, fmt.Errorf("CRI ListPodSandbox: %w", err)
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
	resp, err := c.unary(ctx, podSandboxStatus, encodeStatusRequest(id, true))
	if err != nil {
		return Status{}, fmt.Errorf("CRI PodSandboxStatus %s: %w", id, err)
	}
	st, err := decodeStatus(resp, sandboxinfo.Key)
	if err != nil {
		return Status{}, fmt.Errorf("CRI PodSandboxStatus %s: %w", id, err)
	}
	if !st.hasStatus {
		return Status{}, fmt.Errorf("CRI PodSandboxStatus %s: no status", id)
	}
	out := Status{Annotations: st.annotations, HostNetwork: st.hostNetwork}
	for _, a := range append([]string{st.ip}, st.moreIPs...) {
		if a == "" {
			continue
		}
		ip, err := netip.ParseAddr(a)
		if err != nil {
			return Status{}, fmt.Errorf("CRI PodSandboxStatus %s: address %q: %w", id, a, err)
		}
		out.IPs = append(out.IPs, ip.Unmap())
	}
	if v, ok := st.info[sandboxinfo.Key]; ok {
		in, err := sandboxinfo.Parse(v)
		if err != nil {
			return Status{}, fmt.Errorf("CRI PodSandboxStatus %s: %w", id, err)
		}
		out.Netns, out.Pid = in.Netns, in.Pid
	}
	return out, nil
}
