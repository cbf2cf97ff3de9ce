package main

import (
	"errors"
	"net/netip"
	"os"
	"time"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/plugins/ipam/stickyip/cni"
	"github.com/stickyip/stickyip/reservation"
)

// The CNI verbs. Each runs through cni.Run (config, log, store, engine, the
// error mapping) and runs its own store transaction here, the engine's rule
// for the verb inside it.

func cmdAdd(args *skel.CmdArgs) error {
	return cni.Run(args, func(c *cni.Call) error {
		req, err := c.Conf.AddRequest(args.ContainerID, args.IfName, args.Netns, c.Log)
		if err != nil {
			return err
		}
		recs, err := allocate(c, req) // waits, unlocked, for a previous holder's DEL
		if err != nil {
			return err
		}
		result, err := c.Result(recs)
		if err != nil {
			return err
		}
		c.Log.Info("ADD", "container", args.ContainerID, "ifname", args.IfName, "pod", req.Identity.Pod(),
			"ips", ipsOf(recs), "reserveFor", req.Duration.String(), "clamped", req.Clamped)
		return cni.PrintResult(os.Stdout, result, c.Conf.CNIVersion)
	})
}

// holderPoll is how often an ADD waiting for its identity's previous holder
// looks again: the replacement runs at most this long after the holder's DEL.
const holderPoll = 100 * time.Millisecond

// holderAlive is called each time an ADD finds its identity's previous
// holder alive, before it sleeps with the store unlocked: a test waits on
// it for proof that the ADD is waiting (nil in the plugin).
var holderAlive func()

// allocate runs the engine's ADD in one store transaction. While the
// identity's address is held by a sandbox that may still be running
// (ipam.ErrHolderAlive: a replacement created before its predecessor is gone)
// it tries again every holderPoll until ipam.holderWait has passed, with the
// store unlocked in between so that the holder's DEL, and every other call,
// can run. Then the error stands, naming the holder (CNI error 11).
func allocate(c *cni.Call, req ipam.AddRequest) ([]*reservation.Record, error) {
	deadline := time.Now().Add(c.Conf.HolderWait)
	for waited := false; ; waited = true {
		var recs []*reservation.Record
		err := c.Store.Update(c.Conf.Name, func(tx reservation.Txn) (err error) {
			recs, err = c.Engine.Add(tx, req)
			return err
		})
		if !errors.Is(err, ipam.ErrHolderAlive) || !time.Now().Before(deadline) {
			if waited {
				c.Log.Info("waited for the identity's previous holder", "pod", req.Identity.Pod(),
					"waited", time.Since(deadline.Add(-c.Conf.HolderWait)).Round(time.Millisecond).String(), "ok", err == nil)
			}
			return recs, err
		}
		if holderAlive != nil {
			holderAlive()
		}
		time.Sleep(min(holderPoll, time.Until(deadline)))
	}
}

// cmdDel releases the sandbox's addresses through the store's journal: no
// disk sync (test/reliability/README.md, "What a DEL guarantees"). A DEL lost to a
// power cut is redone by the next boot's first call, which releases the
// previous boot's allocations as DELs.
func cmdDel(args *skel.CmdArgs) error {
	return cni.Run(args, func(c *cni.Call) error {
		err := c.Store.UpdateJournaled(c.Conf.Name, func(tx reservation.Txn) error {
			return c.Engine.Del(tx, args.ContainerID, args.IfName) // ErrNoChange: nothing written
		})
		if errors.Is(err, reservation.ErrAwaiting) {
			c.Log.Info("DEL: nothing to release, the node has no store yet", "container", args.ContainerID, "ifname", args.IfName)
			return nil // no store was ever created: the sandbox holds nothing of it
		}
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
		if errors.Is(err, reservation.ErrAwaiting) {
			return nil // no store yet: nothing to collect
		}
		if err == nil {
			c.Log.Info("GC", "released", n, "valid", len(c.Conf.ValidAttachments))
		}
		return err
	})
}

// cmdStatus answers whether stickyip can serve ADDs on this node at all. A
// full pool is a per-pod condition (ADD error 100), never a STATUS failure:
// containerd turns a failing STATUS into NetworkReady=false and the node goes
// NotReady (docs/DESIGN.md, "Runtimes and the CNI verbs", STATUS).
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
