package main

import (
	"net/netip"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/stickyip/stickyip/plugins/ipam/stickyip/cni"
	"github.com/stickyip/stickyip/reservation"
)

func cmdAdd(args *skel.CmdArgs) error {
	return cni.Run(args, func(c *cni.Call) error {
		req, err := c.Conf.AddRequest(args.ContainerID, args.IfName, args.Netns, c.Log)
		if err != nil {
			return err
		}
		recs, err := c.Allocate(req) // waits, unlocked, for a previous holder's DEL
		if err != nil {
			return err
		}
		result, err := c.Result(recs)
		if err != nil {
			return err
		}
		c.Log.Info("ADD", "container", args.ContainerID, "ifname", args.IfName, "pod", req.Identity.Pod(),
			"ips", ipsOf(recs), "reserveFor", req.Duration.String(), "clamped", req.Clamped)
		return types.PrintResult(result, c.Conf.CNIVersion)
	})
}

func cmdDel(args *skel.CmdArgs) error {
	return cni.Run(args, func(c *cni.Call) error {
		err := c.Store.Update(c.Conf.Name, func(tx reservation.Txn) error {
			return c.Engine.Del(tx, args.ContainerID, args.IfName) // ErrNoChange: nothing committed, nothing synced
		})
		if err == nil {
			c.Log.Info("DEL", "container", args.ContainerID, "ifname", args.IfName)
		}
		return err
	})
}

func cmdCheck(args *skel.CmdArgs) error {
	return cni.Run(args, func(c *cni.Call) error {
		prev, err := c.PrevResultIPs()
		if err != nil {
			return err
		}
		return c.Store.View(c.Conf.Name, func(tx reservation.Txn) error {
			return c.Engine.Check(tx, args.ContainerID, args.IfName, prev)
		})
	})
}

func cmdGC(args *skel.CmdArgs) error {
	return cni.Run(args, func(c *cni.Call) error {
		var n int
		err := c.Store.Update(c.Conf.Name, func(tx reservation.Txn) (err error) {
			n, err = c.Engine.GC(tx, c.Conf.ValidAttachments)
			return err
		})
		if err == nil {
			c.Log.Info("GC", "released", n, "valid", len(c.Conf.ValidAttachments))
		}
		return err
	})
}

// cmdStatus answers whether stickyip can serve ADDs on this node at all. A
// full pool is a per-pod condition (ADD error 100), never a STATUS failure:
// containerd turns a failing STATUS into NetworkReady=false and the node goes
// NotReady (docs/plugin.md, "Runtimes and the CNI verbs", STATUS).
func cmdStatus(args *skel.CmdArgs) error {
	return cni.Run(args, func(c *cni.Call) error {
		return c.Health()
	})
}

func ipsOf(recs []*reservation.Record) []netip.Addr {
	out := make([]netip.Addr, len(recs))
	for i, r := range recs {
		out[i] = r.IP
	}
	return out
}
