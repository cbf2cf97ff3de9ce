package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/stickyip/stickyip/checkpointd/install"
)

// TestInstallCommand runs `checkpointd install` and `uninstall` as the
// DaemonSet does, on a node laid out in a temporary directory.
func TestInstallCommand(t *testing.T) {
	root := t.TempDir()
	p := func(s string) string { return filepath.Join(root, s) }
	for _, d := range []string{"pki", "img"} {
		if err := os.MkdirAll(p(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(name, data string, mode os.FileMode) {
		if err := os.WriteFile(p(name), []byte(data), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("img/stickyip", "plugin v1", 0o755)
	write("kubelet.conf", `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443", certificate-authority: pki/ca.crt}}]
users: [{name: u, user: {client-certificate: /var/lib/kubelet/pki/kubelet-client-current.pem, client-key: /var/lib/kubelet/pki/kubelet-client-current.pem}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`, 0o600)
	t.Setenv("NODE_NAME", "node-a")
	t.Setenv("CHECKPOINTD_ALLOW_NAMESPACES", "kube-system,edge")
	args := []string{"--image=registry.example/stickyip:v1", "--plugin=" + p("img/stickyip"),
		"--cni-bin-dir=" + p("cni/bin"), "--static-pod-dir=" + p("manifests"), "--kubeconfig=" + p("kubelet.conf"),
		"--checkpoint-dir=" + p("ckpt"), "--volume-dir=" + p("run/checkpointd"), "--data-dir=" + p("ipam"),
		"--flannel-subnet-file=" + p("run/flannel/subnet.env"), "--grace-period=45s"}
	if code := run(append([]string{"install"}, args...)); code != 0 {
		t.Fatalf("install: exit %d", code)
	}
	if b, err := os.ReadFile(p("cni/bin/stickyip")); err != nil || string(b) != "plugin v1" {
		t.Fatalf("installed plugin: %q, %v", b, err)
	}
	manifest := p("manifests/" + install.ManifestName)
	b, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(b, &pod); err != nil {
		t.Fatalf("static pod manifest: %v\n%s", err, b)
	}
	c := pod.Spec.Containers[0]
	if c.Image != "registry.example/stickyip:v1" || !pod.Spec.HostNetwork || pod.Namespace != "kube-system" {
		t.Errorf("static pod: image %s hostNetwork %v namespace %s", c.Image, pod.Spec.HostNetwork, pod.Namespace)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	for k, v := range map[string]string{
		"NODE_NAME":                    "node-a",
		"CHECKPOINTD_ALLOW_NAMESPACES": "kube-system,edge", // the operator's policy, from the environment
		"CHECKPOINTD_GRACE_PERIOD":     "45s",              // and from a flag
		"CHECKPOINTD_STATIC_POD_DIR":   p("manifests"),
		"CHECKPOINTD_KUBECONFIG":       p("kubelet.conf"),
	} {
		if env[k] != v {
			t.Errorf("static pod env %s=%q, want %q", k, env[k], v)
		}
	}
	for _, k := range []string{"CHECKPOINTD_IMAGE", "CHECKPOINTD_CNI_BIN_DIR", "CHECKPOINTD_WAIT"} {
		if _, ok := env[k]; ok {
			t.Errorf("static pod env has the installer's own setting %s", k)
		}
	}
	mounted := map[string]bool{}
	for _, m := range c.VolumeMounts {
		mounted[m.MountPath] = true
	}
	for _, want := range []string{p("kubelet.conf"), p("pki"), "/var/lib/kubelet/pki", p("manifests"), p("ckpt"),
		p("run/checkpointd"), p("ipam"), p("run/flannel"), "/run/containerd/containerd.sock", install.NetnsDir} {
		if !mounted[want] {
			t.Errorf("static pod does not mount %s (mounts: %v)", want, mounted)
		}
	}

	// Same version again: nothing is rewritten.
	st1, _ := os.Stat(manifest)
	pl1, _ := os.Stat(p("cni/bin/stickyip"))
	if code := run(append([]string{"install"}, args...)); code != 0 {
		t.Fatalf("second install: exit %d", code)
	}
	st2, _ := os.Stat(manifest)
	pl2, _ := os.Stat(p("cni/bin/stickyip"))
	if st1.Sys().(*syscall.Stat_t).Ino != st2.Sys().(*syscall.Stat_t).Ino || !st1.ModTime().Equal(st2.ModTime()) ||
		pl1.Sys().(*syscall.Stat_t).Ino != pl2.Sys().(*syscall.Stat_t).Ino || !pl1.ModTime().Equal(pl2.ModTime()) {
		t.Error("installing the same version again replaced files")
	}

	// Settings checkpointd would refuse fail the installer, naming them.
	t.Setenv("CHECKPOINTD_GRACE_PERIOD", "soon")
	if code := run(append([]string{"install"}, args[:len(args)-1]...)); code != 2 {
		t.Errorf("install with CHECKPOINTD_GRACE_PERIOD=soon: exit %d, want 2", code)
	}
	if code := run(append([]string{"install"}, append(args, "--volumes=maybe")...)); code != 2 {
		t.Errorf("install with --volumes=maybe: exit %d, want 2", code)
	}
	if code := run(append([]string{"install"}, args[1:]...)); code != 2 {
		t.Errorf("install without --image: exit %d, want 2", code)
	}

	// --static-pod=false (checkpointd from the systemd unit): the static pod goes, the plugin stays.
	if code := run(append([]string{"install", "--static-pod=false"}, args...)); code != 0 {
		t.Fatalf("install --static-pod=false: exit %d", code)
	}
	if _, err := os.Stat(manifest); !os.IsNotExist(err) {
		t.Errorf("install --static-pod=false left the static pod: %v", err)
	}
	if code := run(append([]string{"install"}, args...)); code != 0 {
		t.Fatalf("install: exit %d", code)
	}

	// Uninstall: the static pod and the plugin go; the IPAM store stays.
	if err := os.MkdirAll(p("ipam"), 0o755); err != nil {
		t.Fatal(err)
	}
	write("ipam/stickyip.db", "store", 0o600)
	if code := run(append([]string{"uninstall", "--listen-address="}, args[1:]...)); code != 0 {
		t.Fatalf("uninstall: exit %d", code)
	}
	for _, gone := range []string{manifest, p("cni/bin/stickyip")} {
		if _, err := os.Stat(gone); !os.IsNotExist(err) {
			t.Errorf("after uninstall %s: %v, want it gone", gone, err)
		}
	}
	if _, err := os.Stat(p("ipam/stickyip.db")); err != nil {
		t.Errorf("uninstall touched the IPAM store: %v", err)
	}
}

// TestReadyFile: install and uninstall create --ready-file only once they
// succeeded, and `checkpointd ready` (the DaemonSet's readiness probe, given
// the file by CHECKPOINTD_READY_FILE as the manifest does) answers 0 only then.
func TestReadyFile(t *testing.T) {
	root := t.TempDir()
	p := func(s string) string { return filepath.Join(root, s) }
	ready := p("ready")
	t.Setenv("CHECKPOINTD_READY_FILE", ready)
	if code := run([]string{"ready"}); code != 1 {
		t.Errorf("ready before any install: exit %d, want 1", code)
	}
	if err := os.WriteFile(p("stickyip"), []byte("plugin"), 0o755); err != nil {
		t.Fatal(err)
	}
	args := []string{"--plugin=" + p("stickyip"), "--cni-bin-dir=" + p("bin"), "--static-pod=false", "--static-pod-dir=" + p("manifests")}
	if code := run(append([]string{"install", "--plugin=" + p("missing")}, args[1:]...)); code != 1 {
		t.Fatalf("install of a missing plugin: exit %d, want 1", code)
	}
	if code := run([]string{"ready"}); code != 1 {
		t.Errorf("ready after a failed install: exit %d, want 1", code)
	}
	if code := run(append([]string{"install"}, args...)); code != 0 {
		t.Fatalf("install: exit %d", code)
	}
	if code := run([]string{"ready"}); code != 0 {
		t.Errorf("ready after the install: exit %d, want 0", code)
	}
	if err := os.Remove(ready); err != nil {
		t.Fatal(err)
	}
	if code := run(append([]string{"uninstall", "--listen-address=", "--checkpoint-dir=" + p("ckpt"), "--volume-dir=" + p("vol"), "--data-dir=", "--cni-conf-dir="}, args...)); code != 0 {
		t.Fatalf("uninstall: exit %d", code)
	}
	if code := run([]string{"ready", "--ready-file=" + ready}); code != 0 {
		t.Errorf("ready after the uninstall: exit %d, want 0", code)
	}
	if _, err := os.Stat(p("bin/stickyip")); !os.IsNotExist(err) {
		t.Errorf("plugin after the uninstall: %v", err)
	}
}
