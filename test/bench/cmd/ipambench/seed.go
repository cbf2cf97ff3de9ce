package main

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"path/filepath"
)

// hostLocalPool lists the addresses host-local hands out from a single IPv4 subnet with
// default rangeStart, rangeEnd and gateway: network+2 .. broadcast-1 (network+1 is the
// gateway, which host-local skips).
func hostLocalPool(subnet *net.IPNet) []net.IP {
	base := binary.BigEndian.Uint32(subnet.IP.To4())
	ones, bits := subnet.Mask.Size()
	size := uint32(1) << uint(bits-ones)
	pool := make([]net.IP, 0, size)
	for off := uint32(2); off < size-1; off++ {
		ip := make(net.IP, 4)
		binary.BigEndian.PutUint32(ip, base+off)
		pool = append(pool, ip)
	}
	return pool
}

// seedHostLocal writes allocations for all but free addresses of subnet into netDir, in
// host-local's on-disk format: one file per IP named after it, holding
// "containerID\r\nifname", plus last_reserved_ip.0. The free addresses are spread evenly
// over the pool and last_reserved_ip.0 names the first of them, as if it had just been
// allocated and released: each ADD then scans one gap, as on a busy node. It returns
// the seeded addresses and the free ones.
func seedHostLocal(netDir string, subnet *net.IPNet, free int) (seeded map[string]bool, freeIPs []net.IP, err error) {
	if err := os.MkdirAll(netDir, 0o755); err != nil {
		return nil, nil, err
	}
	pool := hostLocalPool(subnet)
	if free < 1 || free > len(pool) {
		return nil, nil, fmt.Errorf("free=%d out of range 1..%d", free, len(pool))
	}
	isFree := make(map[int]bool, free)
	for k := 0; k < free; k++ {
		isFree[k*len(pool)/free+len(pool)/(2*free)] = true
	}
	seeded = make(map[string]bool, len(pool)-free)
	for i, ip := range pool {
		if isFree[i] {
			freeIPs = append(freeIPs, ip)
			continue
		}
		p := newPod("seed", i)
		if err := os.WriteFile(filepath.Join(netDir, ip.String()), []byte(p.containerID+"\r\n"+p.ifname), 0o644); err != nil {
			return nil, nil, err
		}
		seeded[ip.String()] = true
	}
	if err := os.WriteFile(filepath.Join(netDir, "last_reserved_ip.0"), []byte(freeIPs[0].String()), 0o644); err != nil {
		return nil, nil, err
	}
	return seeded, freeIPs, nil
}

// freeFor returns how many addresses stay free when count of the pool are allocated.
func freeFor(subnet *net.IPNet, count int) int {
	return len(hostLocalPool(subnet)) - count
}
