package main

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/stickyip/stickyip/test/harness"
)

// apiAddr is where the control plane's API server listens, on the
// loopback of the network namespace it runs in.
const apiAddr = "127.0.0.1:6443"

// controlPlane is etcd and kube-apiserver (built by scripts/build-k8s.sh)
// in a network namespace the driver made, with one administrator token.
type controlPlane struct {
	etcd, apiserver *daemon
	kubeconfig      string // the administrator's, for the daemons in the namespace
	client          *kubernetes.Clientset
	dir             string
	tokens          map[string]string // user → token
	auditLog        string            // "": none
}

// startControlPlane starts etcd and kube-apiserver from binDir in the
// namespace n, their files under dir, and waits until the API server is
// ready.
func startControlPlane(dir, binDir string, n *harness.Netns) (*controlPlane, error) {
	return startControlPlaneWith(dir, binDir, n, cpOptions{})
}

// cpOptions add to the control plane what a workload needs beyond one
// administrator.
type cpOptions struct {
	// users get a token each (controlPlane.tokens): name → its groups
	// (comma-separated).
	users map[string]string
	// audit, when set, is the API server's audit policy; its log is
	// controlPlane.auditLog.
	audit string
	// admission are admission plugins enabled beyond the defaults.
	admission string
}

// startControlPlaneWith is startControlPlane with opts.
func startControlPlaneWith(dir, binDir string, n *harness.Netns, opts cpOptions) (*controlPlane, error) {
	tokens, err := writeCredentials(dir, opts.users)
	if err != nil {
		return nil, err
	}
	token := tokens["admin"]
	cp := &controlPlane{kubeconfig: filepath.Join(dir, "admin.kubeconfig"), dir: dir, tokens: tokens}
	if err := cp.writeKubeconfig(cp.kubeconfig, "admin", apiAddr); err != nil {
		return nil, err
	}
	cp.etcd, err = startDaemon("etcd", n.Path, filepath.Join(dir, "etcd.log"), nil, filepath.Join(binDir, "etcd"),
		"--name=bench", "--data-dir="+filepath.Join(dir, "etcd"), "--log-level=warn",
		"--listen-client-urls=http://127.0.0.1:2379", "--advertise-client-urls=http://127.0.0.1:2379",
		"--listen-peer-urls=http://127.0.0.1:2380", "--initial-advertise-peer-urls=http://127.0.0.1:2380",
		"--initial-cluster=bench=http://127.0.0.1:2380")
	if err != nil {
		return nil, err
	}
	args := []string{filepath.Join(binDir, "kube-apiserver"),
		"--etcd-servers=http://127.0.0.1:2379", "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port=6443",
		"--cert-dir=" + filepath.Join(dir, "certs"), "--token-auth-file=" + filepath.Join(dir, "tokens.csv"),
		"--authorization-mode=Node,RBAC", "--endpoint-reconciler-type=none", "--service-cluster-ip-range=10.96.0.0/24",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + filepath.Join(dir, "sa.pub"), "--service-account-signing-key-file=" + filepath.Join(dir, "sa.key"), "--v=0"}
	if opts.audit != "" {
		policy := filepath.Join(dir, "audit-policy.yaml")
		if err := os.WriteFile(policy, []byte(opts.audit), 0o644); err != nil {
			cp.stop()
			return nil, err
		}
		cp.auditLog = filepath.Join(dir, "audit.log")
		args = append(args, "--audit-policy-file="+policy, "--audit-log-path="+cp.auditLog, "--audit-log-format=json", "--audit-log-maxbackup=0")
	}
	if opts.admission != "" {
		args = append(args, "--enable-admission-plugins="+opts.admission)
	}
	cp.apiserver, err = startDaemon("kube-apiserver", n.Path, filepath.Join(dir, "kube-apiserver.log"), nil, args...)
	if err != nil {
		cp.stop()
		return nil, err
	}
	cfg := &rest.Config{Host: "https://" + apiAddr, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		Timeout: 15 * time.Second, QPS: 100, Burst: 200, Dial: dialIn(n.Path)}
	if cp.client, err = kubernetes.NewForConfig(cfg); err != nil {
		cp.stop()
		return nil, err
	}
	err = harness.Eventually(2*time.Minute, time.Second, func() error {
		if err := cp.etcd.exited(); err != nil {
			return err
		}
		if err := cp.apiserver.exited(); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err := cp.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err
	})
	if err != nil {
		cp.stop()
		return nil, fmt.Errorf("kube-apiserver not ready: %w: %s", err, tail(cp.apiserver.log, 10))
	}
	return cp, nil
}

// writeKubeconfig writes a kubeconfig at path with user's token for the
// API server at addr (in the control plane's namespace).
func (cp *controlPlane) writeKubeconfig(path, user, addr string) error {
	kc := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters:\n- name: bench\n  cluster: {server: \"https://%s\", insecure-skip-tls-verify: true}\n"+
		"users:\n- name: u\n  user: {token: %s}\ncontexts:\n- name: bench\n  context: {cluster: bench, user: u}\ncurrent-context: bench\n", addr, cp.tokens[user])
	return os.WriteFile(path, []byte(kc), 0o600)
}

// stop stops the API server, then etcd.
func (cp *controlPlane) stop() {
	cp.apiserver.stop()
	cp.etcd.stop()
}

// writeCredentials writes the API server's token file (an administrator,
// and users with their groups) and service-account key pair in dir, and
// returns each user's token.
func writeCredentials(dir string, users map[string]string) (map[string]string, error) {
	tokens := map[string]string{}
	var lines strings.Builder
	for _, u := range append([]string{"admin"}, slices.Sorted(maps.Keys(users))...) {
		tok := make([]byte, 16)
		if _, err := rand.Read(tok); err != nil {
			return nil, err
		}
		tokens[u] = hex.EncodeToString(tok)
		groups := users[u]
		if u == "admin" {
			groups = "system:masters"
		}
		fmt.Fprintf(&lines, "%s,%s,%s", tokens[u], u, u)
		if groups != "" {
			fmt.Fprintf(&lines, ",\"%s\"", groups)
		}
		lines.WriteString("\n")
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, err
	}
	for name, data := range map[string][]byte{
		"tokens.csv": []byte(lines.String()),
		"sa.key":     pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}),
		"sa.pub":     pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return nil, err
		}
	}
	return tokens, nil
}

// dialIn dials from inside the network namespace at nsPath: the driver
// reaches the API server there without anything listening on, or routing
// to, the machine's own network.
func dialIn(nsPath string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: 5 * time.Second}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
			var err error
			c, err = d.DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
}
