package ipam

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
)

// ParseResolvConf reads the resolv.conf named by the resolvConf key into CNI
// DNS settings (nameserver, domain, search, options), as host-local does.
func ParseResolvConf(path string) (*types.DNS, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: ipam.resolvConf: %v", ErrInvalidConfig, err)
	}
	defer f.Close()
	dns := &types.DNS{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		fields := strings.Fields(line)
		switch fields[0] {
		case "nameserver":
			dns.Nameservers = append(dns.Nameservers, fields[1:]...)
		case "domain":
			if len(fields) > 1 {
				dns.Domain = fields[1]
			}
		case "search":
			dns.Search = append(dns.Search, fields[1:]...)
		case "options":
			dns.Options = append(dns.Options, fields[1:]...)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: ipam.resolvConf %s: %v", ErrInvalidConfig, path, err)
	}
	return dns, nil
}
