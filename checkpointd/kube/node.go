package kube

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"
)

// Node returns the node's Node as the watch last saw it, and false while
// the watch has not synced or the Node does not exist.
func (c *Client) Node() (*corev1.Node, bool) {
	if !c.nodes.HasSynced() {
		return nil, false
	}
	for _, o := range c.nodes.GetStore().List() {
		if n, ok := o.(*corev1.Node); ok && n.Name == c.opts.Node {
			return n, true
		}
	}
	return nil, false
}

// NodePodCIDRs returns the node's Node and its pod CIDRs; false while the
// watch has not synced or the Node does not exist.
func (c *Client) NodePodCIDRs() (*corev1.Node, []netip.Prefix, bool) {
	n, ok := c.Node()
	if !ok {
		return nil, nil, false
	}
	return n, PodCIDRs(n), true
}

// PodCIDRs returns a Node's pod CIDRs (spec.podCIDRs, else spec.podCIDR);
// those that do not parse are left out.
func PodCIDRs(n *corev1.Node) []netip.Prefix {
	cidrs := n.Spec.PodCIDRs
	if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
		cidrs = []string{n.Spec.PodCIDR}
	}
	var out []netip.Prefix
	for _, c := range cidrs {
		if p, err := netip.ParsePrefix(c); err == nil {
			out = append(out, p.Masked())
		}
	}
	return out
}
