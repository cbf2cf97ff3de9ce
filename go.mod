module github.com/stickyip/stickyip

go 1.26.8

require (
	github.com/containernetworking/cni v1.3.0 // indirect
	github.com/containernetworking/plugins v1.9.1 // indirect
	github.com/vishvananda/netns v0.0.5 // indirect
	go.etcd.io/bbolt v1.4.3 // indirect
	golang.org/x/sys v0.35.0 // indirect
)
