package rebuild

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// NetnsAddrs returns the addresses configured in the network namespace at
// path, by interface name (loopback and link-local addresses left out):
// what a sandbox really holds, whatever any record says. It reads the
// namespace through a netlink socket opened in it, without moving the
// calling thread.
func NetnsAddrs(path string) (map[string][]netip.Addr, error) {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("network namespace %s: %w", path, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return nil, fmt.Errorf("network namespace %s: %w", path, err)
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		return nil, fmt.Errorf("network namespace %s: listing links: %w", path, err)
	}
	out := map[string][]netip.Addr{}
	for _, l := range links {
		addrs, err := h.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			return nil, fmt.Errorf("network namespace %s: addresses of %s: %w", path, l.Attrs().Name, err)
		}
		for _, a := range addrs {
			ip, ok := netip.AddrFromSlice(a.IP)
			if !ok {
				continue
			}
			ip = ip.Unmap()
			if ip.IsLoopback() || ip.IsLinkLocalUnicast() {
				continue
			}
			out[l.Attrs().Name] = append(out[l.Attrs().Name], ip)
		}
	}
	return out, nil
}
