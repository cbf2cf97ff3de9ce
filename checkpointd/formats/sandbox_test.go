package formats

import "testing"

// containerd 2.x's verbose sandbox info, shortened to the fields read.
const containerdInfo = `{"pid":4242,"processStatus":"running","netNamespaceClosed":false,"image":"registry.k8s.io/pause:3.10",` +
	`"runtimeSpec":{"ociVersion":"1.2.0","linux":{"namespaces":[{"type":"pid"},{"type":"ipc"},{"type":"uts"},{"type":"mount"},` +
	`{"type":"network","path":"/var/run/netns/cni-8c1f"}]}},"cniResult":{"Interfaces":{}}}`

func TestParseSandboxInfo(t *testing.T) {
	got, err := ParseSandboxInfo(containerdInfo)
	if err != nil || got != (SandboxInfo{Netns: "/var/run/netns/cni-8c1f", Pid: 4242}) {
		t.Fatalf("Parse = %+v, %v", got, err)
	}
	host := `{"pid":7,"runtimeSpec":{"linux":{"namespaces":[{"type":"pid"}]}}}`
	if got, err := ParseSandboxInfo(host); err != nil || got.Netns != "" || got.Pid != 7 {
		t.Fatalf("a hostNetwork sandbox: %+v, %v", got, err)
	}
	for _, bad := range []string{"", "[]", `{"pid":"x"}`, `{"pid":-1}`, `{"runtimeSpec":{"linux":{"namespaces":{}}}}`} {
		if _, err := ParseSandboxInfo(bad); err == nil {
			t.Errorf("ParseSandboxInfo(%q) accepted", bad)
		}
	}
}

// FuzzParseSandboxInfo: any value is refused or read without a negative pid.
func FuzzParseSandboxInfo(f *testing.F) {
	f.Add(containerdInfo)
	f.Add(`{"pid":1}`)
	f.Fuzz(func(t *testing.T, v string) {
		got, err := ParseSandboxInfo(v)
		if err == nil && got.Pid < 0 {
			t.Fatalf("%q read as %+v", v, got)
		}
	})
}
