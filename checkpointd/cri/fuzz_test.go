package cri

import (
	"maps"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// FuzzDecodeSandboxes: any answer decodes without a panic; and every
// ListPodSandboxResponse the runtime's own library accepts, in the form it
// encodes it, reads as that library reads it.
func FuzzDecodeSandboxes(f *testing.F) {
	seed, _ := proto.Marshal(&runtimeapi.ListPodSandboxResponse{Items: []*runtimeapi.PodSandbox{
		{Id: "sb1", State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY, CreatedAt: 1700000000000000000,
			Metadata:    &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "prod", Uid: "u1", Attempt: 2},
			Labels:      map[string]string{"app": "web"},
			Annotations: map[string]string{"io.kubernetes.cri/reserved-ip-duration": "600"}},
		{Id: "sb2"}}})
	f.Add(seed)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		decodeSandboxes(b) // must not panic
		var want runtimeapi.ListPodSandboxResponse
		if proto.Unmarshal(b, &want) != nil {
			return
		}
		canonical, err := proto.MarshalOptions{Deterministic: true}.Marshal(&want)
		if err != nil {
			return
		}
		got, err := decodeSandboxes(canonical)
		if err != nil || len(got) != len(want.Items) {
			t.Fatalf("decodeSandboxes(%x) = %d sandboxes, %v; the library reads %d", canonical, len(got), err, len(want.Items))
		}
		for i, w := range want.Items {
			g := got[i]
			m := w.GetMetadata()
			if g.ID != w.Id || g.Ready != (w.State == runtimeapi.PodSandboxState_SANDBOX_READY) || !g.CreatedAt.Equal(time.Unix(0, w.CreatedAt)) ||
				g.Name != m.GetName() || g.Namespace != m.GetNamespace() || g.UID != m.GetUid() ||
				!maps.Equal(g.Labels, w.Labels) || !maps.Equal(g.Annotations, w.Annotations) {
				t.Fatalf("sandbox %d of %x: read %+v; the library reads %v", i, canonical, g, w)
			}
		}
	})
}

// FuzzDecodeStatus: the same for a PodSandboxStatusResponse, of which
// checkpointd reads the addresses, whether the sandbox is on the node's
// network, its annotations and one key of the verbose information.
func FuzzDecodeStatus(f *testing.F) {
	seed, _ := proto.Marshal(&runtimeapi.PodSandboxStatusResponse{
		Status: &runtimeapi.PodSandboxStatus{Id: "sb1",
			Network:     &runtimeapi.PodSandboxNetworkStatus{Ip: "10.244.1.5", AdditionalIps: []*runtimeapi.PodIP{{Ip: "fd00::5"}}},
			Linux:       &runtimeapi.LinuxPodSandboxStatus{Namespaces: &runtimeapi.Namespace{Options: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE}}},
			Annotations: map[string]string{"a": "b"}},
		Info: map[string]string{"info": `{"pid":1}`, "other": "x"}})
	f.Add(seed)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		decodeStatus(b, "info") // must not panic
		var want runtimeapi.PodSandboxStatusResponse
		if proto.Unmarshal(b, &want) != nil {
			return
		}
		canonical, err := proto.MarshalOptions{Deterministic: true}.Marshal(&want)
		if err != nil {
			return
		}
		got, err := decodeStatus(canonical, "info")
		st := want.GetStatus()
		var more []string
		for _, ip := range st.GetNetwork().GetAdditionalIps() {
			more = append(more, ip.GetIp())
		}
		info := map[string]string{}
		if v, ok := want.Info["info"]; ok {
			info["info"] = v
		}
		if err != nil || got.hasStatus != (want.Status != nil) || got.ip != st.GetNetwork().GetIp() || !slices.Equal(got.moreIPs, more) ||
			got.hostNetwork != (st.GetLinux().GetNamespaces().GetOptions().GetNetwork() == runtimeapi.NamespaceMode_NODE) ||
			!maps.Equal(got.annotations, st.GetAnnotations()) || !maps.Equal(got.info, info) {
			t.Fatalf("decodeStatus(%x) = %+v, %v; the library reads %v", canonical, got, err, &want)
		}
	})
}
