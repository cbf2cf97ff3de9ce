//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kube-flannel's ConfigMap as its release manifest (kube-flannel.yml) ships
// it: flannel delegating to bridge, host-local chosen by flannel itself (no
// ipam block), then portmap.
const (
	flannelNamespace = "kube-flannel"
	flannelConfigMap = "kube-flannel-cfg"
	flannelCNIConf   = `{
  "name": "cbr0",
  "cniVersion": "0.3.1",
  "plugins": [
    {
      "type": "flannel",
      "delegate": {
        "hairpinMode": true,
        "isDefaultGateway": true
      }
    },
    {
      "type": "portmap",
      "capabilities": {
        "portMappings": true
      }
    }
  ]
}
`
	flannelNetConf = `{
  "Network": "10.244.0.0/16",
  "EnableNFTables": false,
  "Backend": {
    "Type": "vxlan"
  }
}
`
)

// createFlannelConfig creates kube-flannel's namespace and ConfigMap as a
// cluster running flannel has them.
func (c *cluster) createFlannelConfig() {
	t := c.t
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: flannelNamespace}}
	if _, err := c.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: flannelConfigMap, Namespace: flannelNamespace, Labels: map[string]string{"app": "flannel", "tier": "node"}},
		Data:       map[string]string{"cni-conf.json": flannelCNIConf, "net-conf.json": flannelNetConf},
	}
	if _, err := c.client.CoreV1().ConfigMaps(flannelNamespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// flannelCNIConfig returns the ConfigMap's cni-conf.json, failing the test
// if net-conf.json is no longer what kube-flannel shipped (a patch of the
// CNI config must leave the network config alone).
func (c *cluster) flannelCNIConfig() string {
	t := c.t
	t.Helper()
	cm, err := c.client.CoreV1().ConfigMaps(flannelNamespace).Get(context.Background(), flannelConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := cm.Data["net-conf.json"]; got != flannelNetConf {
		t.Fatalf("%s/%s net-conf.json changed:\n%s", flannelNamespace, flannelConfigMap, got)
	}
	return cm.Data["cni-conf.json"]
}

// copyFlannelConfig writes the ConfigMap's cni-conf.json as every node's
// conflist, as kube-flannel's install-cni container copies it to
// /etc/cni/net.d/10-flannel.conflist. Every path it names by default is the
// node's own through bindNodePaths but stickyip's logFile, moved into the
// node's log directory (the machine's /var/log is shared).
func (c *cluster) copyFlannelConfig() {
	t := c.t
	t.Helper()
	cniConf := c.flannelCNIConfig()
	for _, n := range c.nodes {
		var conflist map[string]any
		if err := json.Unmarshal([]byte(cniConf), &conflist); err != nil {
			t.Fatalf("cni-conf.json of %s/%s: %v\n%s", flannelNamespace, flannelConfigMap, err, cniConf)
		}
		flannel := conflist["plugins"].([]any)[0].(map[string]any)
		if ipam, ok := flannel["ipam"].(map[string]any); ok && ipam["logFile"] != nil {
			ipam["logFile"] = filepath.Join(n.logDir, "stickyip.log")
		}
		n.writeConflist(conflist)
	}
}
