module github.com/stickyip/stickyip

go 1.26.8

require (
	github.com/containernetworking/cni v1.3.0
	github.com/containernetworking/plugins v1.9.1
	go.etcd.io/bbolt v1.4.3
	golang.org/x/sys v0.35.0
)

require (
	github.com/coreos/go-iptables v0.8.0 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/safchain/ethtool v0.6.2 // indirect
	github.com/vishvananda/netlink v1.3.1 // indirect
	github.com/vishvananda/netns v0.0.5 // indirect
	sigs.k8s.io/knftables v0.0.18 // indirect
)
