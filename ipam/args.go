package ipam

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/stickyip/stickyip/contract"
)

// PodArgs are the CNI_ARGS stickyip understands.
type PodArgs struct {
	Namespace        string     // K8S_POD_NAMESPACE
	Name             string     // K8S_POD_NAME
	UID              string     // K8S_POD_UID
	InfraContainerID string     // K8S_POD_INFRA_CONTAINER_ID
	IP               netip.Addr // IP (requested address, as in host-local)
}

// Limits on identifiers, so that keys stay bounded and errors stay readable.
const (
	maxArgsLen        = 8192
	maxNamespaceLen   = 63
	maxPodNameLen     = 253
	maxUIDLen         = 128
	maxContainerIDLen = 256
	maxIfNameLen      = 15
)

// ParseArgs parses CNI_ARGS ("K=V;K=V"). Unknown keys are an error unless
// IgnoreUnknown is true-ish, as in the CNI library; every error names the key.
func ParseArgs(s string) (PodArgs, error) {
	var a PodArgs
	if s == "" {
		return a, nil
	}
	if len(s) > maxArgsLen {
		return a, fmt.Errorf("%w: CNI_ARGS is %d bytes, more than %d", ErrInvalidArgs, len(s), maxArgsLen)
	}
	var unknown []string
	ignoreUnknown := false
	for _, pair := range strings.Split(s, ";") {
		if pair == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		if !ok || k == "" {
			return a, fmt.Errorf("%w: CNI_ARGS: %q is not KEY=VALUE", ErrInvalidArgs, contract.Clip(pair, contract.ClipLen))
		}
		var err error
		switch k {
		case "IgnoreUnknown":
			ignoreUnknown = v == "1" || strings.EqualFold(v, "true")
		case "K8S_POD_NAMESPACE":
			a.Namespace, err = boundedArg(k, v, maxNamespaceLen)
		case "K8S_POD_NAME":
			a.Name, err = boundedArg(k, v, maxPodNameLen)
		case "K8S_POD_UID":
			a.UID, err = boundedArg(k, v, maxUIDLen)
		case "K8S_POD_INFRA_CONTAINER_ID":
			a.InfraContainerID, err = boundedArg(k, v, maxContainerIDLen)
		case "IP":
			// host-local accepts one address here, optionally with a prefix length.
			addr := strings.TrimSpace(v)
			if i := strings.IndexByte(addr, '/'); i >= 0 {
				addr = addr[:i]
			}
			if a.IP, err = netip.ParseAddr(addr); err != nil || a.IP.Zone() != "" {
				err = fmt.Errorf("%w: CNI_ARGS IP=%q is not an IP address", ErrInvalidArgs, contract.Clip(v, contract.ClipLen))
			}
			a.IP = a.IP.Unmap()
		default:
			unknown = append(unknown, k)
		}
		if err != nil {
			return a, err
		}
	}
	if len(unknown) > 0 && !ignoreUnknown {
		return a, fmt.Errorf("%w: CNI_ARGS: unknown keys %s (add IgnoreUnknown=1 to pass keys for other plugins)", ErrInvalidArgs, contract.Clip(strings.Join(unknown, ","), contract.ClipLen))
	}
	return a, nil
}

func boundedArg(key, v string, maxLen int) (string, error) {
	if len(v) > maxLen {
		return "", fmt.Errorf("%w: CNI_ARGS %s is %d characters, more than %d", ErrInvalidArgs, key, len(v), maxLen)
	}
	if strings.ContainsAny(v, "\x00/") {
		return "", fmt.Errorf("%w: CNI_ARGS %s=%q contains '/' or NUL", ErrInvalidArgs, key, contract.Clip(v, contract.ClipLen))
	}
	return v, nil
}
