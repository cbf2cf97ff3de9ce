#!/usr/bin/env bash
# Drive stickyip by hand with cnitool (as root): a pod that keeps its IP for
# 10 minutes after deletion, deleted and re-created with a new sandbox.
#
#   go install github.com/containernetworking/cni/cnitool@v1.3.0
#   NETCONFPATH=/etc/cni/net.d CNI_PATH=/opt/cni/bin ./conf/cnitool-example.sh
set -euo pipefail
net=${NETWORK:-stickynet}
pod_args="IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web;K8S_POD_UID=$(cat /proc/sys/kernel/random/uuid)"
caps='{"io.kubernetes.cri.pod-annotations":{"io.kubernetes.cri/reserved-ip-duration":"10"}}'

ip netns add web-1
CNI_ARGS=$pod_args CAP_ARGS=$caps cnitool add "$net" /var/run/netns/web-1
CNI_ARGS=$pod_args CAP_ARGS=$caps cnitool del "$net" /var/run/netns/web-1
ip netns del web-1

stickyip list            # the address is now "reserved" for default/web

ip netns add web-2       # the pod comes back: new sandbox, same namespace/name
CNI_ARGS=$pod_args CAP_ARGS=$caps cnitool add "$net" /var/run/netns/web-2   # same IP
CNI_ARGS=$pod_args CAP_ARGS=$caps cnitool del "$net" /var/run/netns/web-2
ip netns del web-2
