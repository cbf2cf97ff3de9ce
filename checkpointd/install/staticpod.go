package install

import (
	"fmt"
	"net"
	"path/filepath"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/stickyip/stickyip/checkpointd/config"
	"github.com/stickyip/stickyip/checkpointd/flannel"
	"github.com/stickyip/stickyip/contract"
)

// Names of checkpointd's static pod: the pod (the kubelet calls its mirror
// pod <PodName>-<node>) in PodNamespace, and its manifest file in the
// kubelet's staticPodPath. The file name does not start with the prefix of
// checkpointd's own copies (reconcile.StaticPrefix), so no cleanup removes it.
const (
	PodName      = "stickyip-checkpointd"
	PodNamespace = "kube-system"
	ManifestName = "stickyip-checkpointd.yaml"
)

// HostPath is a host file or directory the static pod mounts at the same
// path: the manifests checkpointd writes name host paths, so the paths it
// sees must be the host's.
type HostPath struct {
	Name     string
	Path     string
	Type     corev1.HostPathType
	ReadOnly bool
}

// StaticPod is checkpointd's static pod: the kubelet starts it from local
// disk at boot, with no API server (hostNetwork: no CNI either), from an
// image already in the node's runtime. It runs with the node's identity (the
// kubelet's kubeconfig, mounted read-only) and the operator's CHECKPOINTD_*
// settings, exactly as the systemd unit does.
type StaticPod struct {
	Image         string
	Env           []corev1.EnvVar // the CHECKPOINTD_* settings, NODE_NAME
	Mounts        []HostPath
	ListenAddress string // checkpointd's /healthz, for the liveness probe; "" none
}

// Pod returns the static pod object.
func (s StaticPod) Pod() (*corev1.Pod, error) {
	no, yes, root := false, true, int64(0)
	c := corev1.Container{
		Name:            "checkpointd",
		Image:           s.Image,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         []string{"/checkpointd"},
		Env:             s.Env,
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("40Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("200Mi")},
		},
		SecurityContext: &corev1.SecurityContext{
			RunAsUser:                &root,
			AllowPrivilegeEscalation: &no,
			ReadOnlyRootFilesystem:   &yes,
			Capabilities: &corev1.Capabilities{
				Drop: []corev1.Capability{"ALL"},
				// write root-owned directories, give restored files the pod's fsGroup
				Add: []corev1.Capability{"CHOWN", "DAC_OVERRIDE", "FOWNER"},
			},
		},
	}
	if s.ListenAddress != "" {
		host, port, err := net.SplitHostPort(s.ListenAddress)
		if err != nil {
			return nil, fmt.Errorf("--listen-address %q: %w", s.ListenAddress, err)
		}
		if host == "" || host == "0.0.0.0" || host == "::" {
			host = "127.0.0.1"
		}
		c.LivenessProbe = &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Host: host, Path: "/healthz", Port: intstr.Parse(port)}},
			InitialDelaySeconds: 15, PeriodSeconds: 20, TimeoutSeconds: 5,
		}
	}
	spec := corev1.PodSpec{
		HostNetwork:                  true,
		AutomountServiceAccountToken: &no,
		PriorityClassName:            "system-node-critical",
		Containers:                   []corev1.Container{c},
	}
	for _, m := range s.Mounts {
		t := m.Type
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: m.Name,
			VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: m.Path, Type: &t}}})
		spec.Containers[0].VolumeMounts = append(spec.Containers[0].VolumeMounts,
			corev1.VolumeMount{Name: m.Name, MountPath: m.Path, ReadOnly: m.ReadOnly})
	}
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: PodName, Namespace: PodNamespace, Labels: map[string]string{
			"app.kubernetes.io/name": "checkpointd", "app.kubernetes.io/part-of": "stickyip"}},
		Spec: spec,
	}, nil
}

// Manifest returns the static pod as the YAML file the kubelet reads.
func (s StaticPod) Manifest() ([]byte, error) {
	p, err := s.Pod()
	if err != nil {
		return nil, err
	}
	b, err := yaml.Marshal(p)
	if err != nil {
		return nil, err
	}
	return append([]byte("# Written by `checkpointd install` (stickyip); `checkpointd uninstall` removes it.\n"), b...), nil
}

// NetnsDir is where containerd and CRI-O bind-mount pod network namespaces
// (their default); checkpointd reads it, never writes.
const NetnsDir = "/var/run/netns"

// Mounts returns the host paths checkpointd with settings cfg reads and
// writes: the kubeconfig and the directories of the files it names (the
// kubelet rotates its client certificate there), the kubelet config, the
// static pod, checkpoint, volume, IPAM data and CNI config directories, the
// runtime's network namespaces (read-only, for the IPAM leak rule), the
// CRI socket and the directory of flannel's subnet file.
func Mounts(cfg config.Config) ([]HostPath, error) {
	var ms []HostPath
	add := func(name, path string, t corev1.HostPathType, ro bool) {
		if path != "" {
			ms = append(ms, HostPath{Name: name, Path: filepath.Clean(path), Type: t, ReadOnly: ro})
		}
	}
	if cfg.Kubeconfig != "" && cfg.Kubeconfig != "in-cluster" {
		add("kubeconfig", cfg.Kubeconfig, corev1.HostPathFile, true)
		kc, err := clientcmd.LoadFromFile(cfg.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig %s: %w", cfg.Kubeconfig, err)
		}
		var files []string
		for _, c := range kc.Clusters {
			files = append(files, c.CertificateAuthority)
		}
		for _, a := range kc.AuthInfos {
			files = append(files, a.ClientCertificate, a.ClientKey, a.TokenFile)
		}
		dirs := map[string]bool{}
		for _, f := range files {
			if f == "" {
				continue
			}
			if !filepath.IsAbs(f) { // relative to the kubeconfig, as client-go reads it
				f = filepath.Join(filepath.Dir(cfg.Kubeconfig), f)
			}
			dirs[filepath.Dir(f)] = true
		}
		var sorted []string
		for d := range dirs {
			sorted = append(sorted, d)
		}
		sort.Strings(sorted)
		for i, d := range sorted {
			add(fmt.Sprintf("kubeconfig-files-%d", i), d, corev1.HostPathDirectory, true)
		}
	}
	add("kubelet-config", cfg.KubeletConfig, corev1.HostPathFile, true)
	static, err := cfg.ResolveStaticPodDir()
	if err != nil {
		return nil, err
	}
	add("static-pods", static, corev1.HostPathDirectoryOrCreate, false)
	add("checkpoints", cfg.CheckpointDir, corev1.HostPathDirectoryOrCreate, false)
	add("volumes", cfg.VolumeDir, corev1.HostPathDirectoryOrCreate, false)
	if sock, ok := strings.CutPrefix(cfg.CRIEndpoint, "unix://"); ok {
		add("cri", sock, corev1.HostPathSocket, false)
	}
	add("ipam", cfg.DataDir, corev1.HostPathDirectoryOrCreate, false)
	if cfg.DataDir != "" {
		// The IPAM leak reconciliation releases an allocation only once its
		// network namespace is gone: without the runtime's netns directory
		// every sandbox would count as alive (safe, but nothing released).
		add("netns", NetnsDir, corev1.HostPathDirectoryOrCreate, true)
		if cfg.RebuildStore {
			// A store rebuild reads the runtime's CNI result cache.
			add("cni-results", cfg.CNIResultsDir, corev1.HostPathDirectoryOrCreate, true)
		}
	}
	add("cni-conf", cfg.CNIConfDir, corev1.HostPathDirectoryOrCreate, true)
	switch lease := cfg.FlannelSubnetFile; lease {
	case "":
	case flannel.SubnetFileFromCNI:
		// The conflist may not exist yet when the installer runs: mount the
		// directory of the flannel plugin's default subnet file.
		add("flannel", filepath.Dir(contract.DefaultFlannelSubnetFile), corev1.HostPathDirectoryOrCreate, false)
	default:
		add("flannel", filepath.Dir(lease), corev1.HostPathDirectoryOrCreate, false)
	}
	return ms, nil
}
