package main

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
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
}

// startControlPlane starts etcd and kube-apiserver from binDir in the
// namespace n, their files under dir, and waits until the API server is
// ready.
func startControlPlane(dir, binDir string, n *harness.Netns) (*controlPlane, error) {
	token, err := writeCredentials(dir)
	if err != nil {
		return nil, err
	}
	cp := &controlPlane{kubeconfig: filepath.Join(dir, "admin.kubeconfig")}
	kc := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters:\n- name: bench\n  cluster: {server: \"https://%s\", insecure-skip-tls-verify: true}\n"+
		"users:\n- name: admin\n  user: {token: %s}\ncontexts:\n- name: bench\n  context: {cluster: bench, user: admin}\ncurrent-context: bench\n", apiAddr, token)
	if err := os.WriteFile(cp.kubeconfig, []byte(kc), 0o600); err != nil {
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
	cp.apiserver, err = startDaemon("kube-apiserver", n.Path, filepath.Join(dir, "kube-apiserver.log"), nil, filepath.Join(binDir, "kube-apiserver"),
		"--etcd-servers=http://127.0.0.1:2379", "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port=6443",
		"--cert-dir="+filepath.Join(dir, "certs"), "--token-auth-file="+filepath.Join(dir, "tokens.csv"),
		"--authorization-mode=Node,RBAC", "--endpoint-reconciler-type=none", "--service-cluster-ip-range=10.96.0.0/24",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+filepath.Join(dir, "sa.pub"), "--service-account-signing-key-file="+filepath.Join(dir, "sa.key"), "--v=0")
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

// stop stops the API server, then etcd.
func (cp *controlPlane) stop() {
	cp.apiserver.stop()
	cp.etcd.stop()
}

// writeCredentials writes the API server's token file (one administrator)
// and service-account key pair in dir, and returns the token.
func writeCredentials(dir string) (string, error) {
	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		return "", err
	}
	token := hex.EncodeToString(tok)
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return "", err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return "", err
	}
	for name, data := range map[string][]byte{
		"tokens.csv": []byte(token + ",admin,admin,system:masters\n"),
		"sa.key":     pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}),
		"sa.pub":     pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return "", err
		}
	}
	return token, nil
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
