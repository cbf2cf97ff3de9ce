package harness

import (
	"context"
	"encoding/json"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// CRIClient is a minimal CRI client for pod sandboxes (what the kubelet does
// for a pod's network, without containers).
type CRIClient struct {
	conn *grpc.ClientConn
	// Runtime is the raw CRI runtime service, for calls the helpers lack.
	Runtime runtimeapi.RuntimeServiceClient
	// Images is the raw CRI image service.
	Images runtimeapi.ImageServiceClient
}

// Pod describes a pod sandbox to run.
type Pod struct {
	Name, Namespace, UID string
	Attempt              uint32
	Annotations, Labels  map[string]string
}

// PodStatus is what a test reads back from PodSandboxStatus.
type PodStatus struct {
	ID    string
	Ready bool
	// IPs are the pod's addresses as CRI reports them (primary first).
	IPs []string
	// PID is the sandbox (pause) process; /proc/<PID>/ns/net is the pod netns.
	PID int
	// Raw is the full CRI status.
	Raw *runtimeapi.PodSandboxStatus
}

// DialCRI connects to a CRI endpoint on a unix socket path.
func DialCRI(address string) (*CRIClient, error) {
	conn, err := grpc.NewClient("unix://"+address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	return &CRIClient{conn: conn, Runtime: runtimeapi.NewRuntimeServiceClient(conn), Images: runtimeapi.NewImageServiceClient(conn)}, nil
}

// Close closes the connection.
func (c *CRIClient) Close() error { return c.conn.Close() }

// Ready returns nil when the runtime reports RuntimeReady and NetworkReady,
// the two conditions the kubelet requires (containerd 2.x adds others, e.g.
// ContainerdHasNoDeprecationWarnings, false on a cgroup v1 host).
func (c *CRIClient) Ready(ctx context.Context) error {
	return c.conditionsTrue(ctx, runtimeapi.RuntimeReady, runtimeapi.NetworkReady)
}

// RuntimeReady returns nil when the runtime reports RuntimeReady, whatever
// its network: a node whose CNI config a pod installs later (kube-flannel).
func (c *CRIClient) RuntimeReady(ctx context.Context) error {
	return c.conditionsTrue(ctx, runtimeapi.RuntimeReady)
}

// conditionsTrue returns nil when each of the conditions types is true.
func (c *CRIClient) conditionsTrue(ctx context.Context, types ...string) error {
	conds, err := c.Conditions(ctx)
	if err != nil {
		return err
	}
	for _, typ := range types {
		cond, ok := conds[typ]
		if !ok {
			return fmt.Errorf("CRI Status reports no %s condition", typ)
		}
		if !cond.Status {
			return fmt.Errorf("CRI condition %s false: %s %s", cond.Type, cond.Reason, cond.Message)
		}
	}
	return nil
}

// Conditions calls CRI Status, as the kubelet does every few seconds, and
// returns the runtime's conditions by type (runtimeapi.NetworkReady, ...).
func (c *CRIClient) Conditions(ctx context.Context) (map[string]*runtimeapi.RuntimeCondition, error) {
	resp, err := c.Runtime.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return nil, err
	}
	out := map[string]*runtimeapi.RuntimeCondition{}
	for _, cond := range resp.GetStatus().GetConditions() {
		out[cond.Type] = cond
	}
	return out, nil
}

// RunPod runs a pod sandbox (the runtime sets up its network through CNI)
// and returns its ID.
func (c *CRIClient) RunPod(ctx context.Context, p Pod) (string, error) {
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{
			Name: p.Name, Namespace: p.Namespace, Uid: p.UID, Attempt: p.Attempt,
		},
		Hostname:    p.Name,
		Labels:      p.Labels,
		Annotations: p.Annotations,
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{
					Network: runtimeapi.NamespaceMode_POD,
					Pid:     runtimeapi.NamespaceMode_POD,
					Ipc:     runtimeapi.NamespaceMode_POD,
				},
			},
		},
	}
	resp, err := c.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		return "", err
	}
	return resp.PodSandboxId, nil
}

// StopPod stops a sandbox (CNI DEL runs).
func (c *CRIClient) StopPod(ctx context.Context, id string) error {
	_, err := c.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
	return err
}

// RemovePod removes a stopped sandbox.
func (c *CRIClient) RemovePod(ctx context.Context, id string) error {
	_, err := c.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
	return err
}

// DeletePod stops then removes a sandbox, as the kubelet does for a deleted pod.
func (c *CRIClient) DeletePod(ctx context.Context, id string) error {
	if err := c.StopPod(ctx, id); err != nil {
		return fmt.Errorf("stop pod sandbox %s: %w", id, err)
	}
	if err := c.RemovePod(ctx, id); err != nil {
		return fmt.Errorf("remove pod sandbox %s: %w", id, err)
	}
	return nil
}

// PodStatus reads a sandbox's status, its IPs and its process ID.
func (c *CRIClient) PodStatus(ctx context.Context, id string) (*PodStatus, error) {
	resp, err := c.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true})
	if err != nil {
		return nil, err
	}
	st := resp.GetStatus()
	out := &PodStatus{ID: id, Ready: st.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY, Raw: st}
	if ip := st.GetNetwork().GetIp(); ip != "" {
		out.IPs = append(out.IPs, ip)
	}
	for _, ip := range st.GetNetwork().GetAdditionalIps() {
		out.IPs = append(out.IPs, ip.GetIp())
	}
	if info, ok := resp.GetInfo()["info"]; ok {
		var v struct {
			PID int `json:"pid"`
		}
		if err := json.Unmarshal([]byte(info), &v); err == nil {
			out.PID = v.PID
		}
	}
	return out, nil
}

// ListPods lists every sandbox the runtime knows.
func (c *CRIClient) ListPods(ctx context.Context) ([]*runtimeapi.PodSandbox, error) {
	resp, err := c.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return nil, err
	}
	return resp.Items, nil
}
