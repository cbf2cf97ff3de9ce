module github.com/stickyip/stickyip

go 1.26.8

require (
	github.com/containernetworking/cni v1.3.0
	github.com/containernetworking/plugins v1.9.1
	go.etcd.io/bbolt v1.4.3
	golang.org/x/sys v0.48.0
	google.golang.org/grpc v1.85.0
	k8s.io/cri-api v0.36.3
)

require (
	github.com/coreos/go-iptables v0.8.0 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/safchain/ethtool v0.6.2 // indirect
	github.com/vishvananda/netlink v1.3.1 // indirect
	github.com/vishvananda/netns v0.0.5 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
	sigs.k8s.io/knftables v0.0.18 // indirect
)
