// Package cni is the CNI edge of stickyip: it turns one plugin invocation
// into a loaded config, a logger, a store and an engine, builds the CNI result,
// and maps the engine's and store's errors to CNI error codes. Nothing here
// writes to stdout except the result printed by the caller.
package cni

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"runtime/debug"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"golang.org/x/sys/unix"

	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/plugins/ipam/stickyip/datadir"
	"github.com/stickyip/stickyip/reservation"
	"github.com/stickyip/stickyip/reservation/boltstore"
)

// CNI error codes stickyip uses beyond the spec's own (the table: docs/troubleshooting.md,
// "CNI errors").
const (
	CodePoolExhausted   uint = 100
	CodeIPUnavailable   uint = 101
	CodeStoreUnreadable uint = 102
	// CodeUnavailable is STATUS's "plugin not available" code (CNI 1.1).
	CodeUnavailable uint = 50
)

// Call is one plugin invocation with everything loaded.
type Call struct {
	Args   *skel.CmdArgs
	Conf   *ipam.Config
	Store  *boltstore.Store
	Engine *ipam.Engine
	Log    *slog.Logger
}

// Run loads the call and runs fn; every failure, panics included, comes back as
// a *types.Error.
func Run(args *skel.CmdArgs, fn func(*Call) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = types.NewError(types.ErrInternal, fmt.Sprintf("stickyip internal error: %v", r), string(debug.Stack()))
		}
	}()
	conf, err := ipam.LoadConfig(args.StdinData, args.Args)
	if err != nil {
		return ToCNIError(err)
	}
	log, closeLog := openLog(conf.LogFile)
	defer closeLog()
	c := &Call{Args: args, Conf: conf, Store: datadir.Open(conf.DataDir, conf.LockTimeout).WithNewStoreWait(conf.NewStoreWait), Log: log}
	c.Engine = ipam.NewEngine(conf, ipam.HostEnv(log.With("network", conf.Name)))
	if err := fn(c); err != nil {
		log.Error("call failed", "network", conf.Name, "container", args.ContainerID, "ifname", args.IfName, "error", err)
		return ToCNIError(err)
	}
	return nil
}

// openLog opens the configured log file (Info and up), or logs warnings and
// errors to stderr, which runtimes capture. Never stdout.
func openLog(path string) (*slog.Logger, func()) {
	if path == "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn, ReplaceAttr: utcTime})), func() {}
	}
	f, err := openAppend(path)
	if err != nil {
		l := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn, ReplaceAttr: utcTime}))
		l.Warn("cannot open ipam.logFile; logging to stderr", "logFile", path, "error", err)
		return l, func() {}
	}
	return slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{ReplaceAttr: utcTime})).With("pid", os.Getpid()), func() { _ = f.Close() }
}

// openAppend opens the log file as os.OpenFile(path, O_WRONLY|O_APPEND|
// O_CREATE, 0o600) does, as a blocking descriptor the runtime's poller never
// sees: os.OpenFile offers every file to epoll, which refuses regular files,
// and the first one of a process sets the poller up, seven system calls in
// every plugin process for nothing.
func openAppend(path string) (*os.File, error) {
	for {
		fd, err := unix.Open(path, unix.O_WRONLY|unix.O_APPEND|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
		switch err {
		case nil:
			return os.NewFile(uintptr(fd), path), nil
		case unix.EINTR:
			continue
		}
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
}

// utcTime writes a log line's time in UTC: the same instant, without
// loading the local time zone (/etc/localtime) in every plugin process.
func utcTime(groups []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey && len(groups) == 0 {
		a.Value = slog.TimeValue(a.Value.Time().UTC())
	}
	return a
}

// Result builds the CNI result for the records of an ADD.
func (c *Call) Result(recs []*reservation.Record) (*current.Result, error) {
	res := &current.Result{CNIVersion: current.ImplementedSpecVersion, Routes: c.Conf.Routes}
	for _, r := range recs {
		ip := net.IP(r.IP.AsSlice())
		var rng *ipam.Range
		for _, rs := range c.Conf.Ranges {
			if rng = rs.RangeFor(ip); rng != nil {
				break
			}
		}
		if rng == nil {
			return nil, fmt.Errorf("%w: recorded address %s is outside every configured range (config changed?)", ipam.ErrInvalidConfig, r.IP)
		}
		res.IPs = append(res.IPs, &current.IPConfig{
			Address: net.IPNet{IP: ip, Mask: rng.Subnet.Mask},
			Gateway: rng.Gateway,
		})
	}
	if c.Conf.ResolvConf != "" {
		dns, err := ipam.ParseResolvConf(c.Conf.ResolvConf)
		if err != nil {
			return nil, err
		}
		res.DNS = *dns
	}
	return res, nil
}

// PrevResultIPs returns the addresses of the prevResult passed to CHECK.
func (c *Call) PrevResultIPs() ([]netip.Addr, error) {
	var conf types.NetConf
	if err := json.Unmarshal(c.Args.StdinData, &conf); err != nil {
		return nil, fmt.Errorf("%w: %v", ipam.ErrInvalidConfig, err)
	}
	if conf.RawPrevResult == nil {
		return nil, nil
	}
	if err := version.ParsePrevResult(&conf); err != nil {
		return nil, fmt.Errorf("%w: prevResult: %v", ipam.ErrInvalidConfig, err)
	}
	res, err := current.NewResultFromResult(conf.PrevResult)
	if err != nil {
		return nil, fmt.Errorf("%w: prevResult: %v", ipam.ErrInvalidConfig, err)
	}
	var out []netip.Addr
	for _, ipc := range res.IPs {
		if a, ok := netip.AddrFromSlice(ipc.Address.IP); ok {
			out = append(out, a.Unmap())
		}
	}
	return out, nil
}

// statusLockWait bounds how long STATUS waits for a writer to finish; a lock
// held longer is not a health problem (see boltstore.Store.Health).
const statusLockWait = 2 * time.Second

// Health answers CNI STATUS: nil when stickyip can serve ADDs on this node,
// else StatusError. It reads only (STATUS is polled every few seconds).
func (c *Call) Health() error {
	if err := datadir.Open(c.Conf.DataDir, min(c.Conf.LockTimeout, statusLockWait)).Health(); err != nil {
		return StatusError(err)
	}
	return nil
}

// StatusError is the CNI error a failing STATUS returns: always code 50 (the
// code CNI 1.1 gives STATUS for "cannot serve ADD"), with a message the
// operator sees in the node's Ready condition (containerd reports it as
// "Network plugin returns error: <message>; <details>").
func StatusError(err error) *types.Error {
	hint := ""
	switch {
	case errors.Is(err, reservation.ErrCorrupt):
		hint = "the file was not modified; checkpointd rebuilds the store from what the node knows and keeps the file aside (unless --rebuild-store=false: then run `stickyip check` and see docs/troubleshooting.md, \"Error 102\")"
	case errors.Is(err, reservation.ErrLost):
		hint = "checkpointd rebuilds the store from what the node knows (unless --rebuild-store=false: see docs/troubleshooting.md, \"Error 102\")"
	case errors.Is(err, reservation.ErrFutureSchema):
		hint = "install the stickyip that wrote it, or a newer one"
	case errors.Is(err, reservation.ErrIO):
		hint = "check ipam.dataDir: it must be a writable directory on a file system with free space"
	}
	return types.NewError(CodeUnavailable, "stickyip cannot allocate addresses on this node: "+err.Error(), hint)
}

// ToCNIError maps an error to the CNI error object the runtime sees.
func ToCNIError(err error) *types.Error {
	var te *types.Error
	if errors.As(err, &te) {
		return te
	}
	code, hint := types.ErrInternal, ""
	switch {
	case errors.Is(err, ipam.ErrInvalidConfig), errors.Is(err, contract.ErrInvalidAnnotation), errors.Is(err, ipam.ErrInvalidRequest):
		code = types.ErrInvalidNetworkConfig
	case errors.Is(err, ipam.ErrInvalidArgs):
		code = types.ErrInvalidEnvironmentVariables
	case errors.Is(err, ipam.ErrHolderAlive):
		code = types.ErrTryAgainLater
	case errors.Is(err, ipam.ErrRebuildWait):
		code, hint = types.ErrTryAgainLater, "the kubelet retries; checkpointd reads the placement index as soon as the API server answers"
	case errors.Is(err, reservation.ErrAwaiting):
		code, hint = types.ErrTryAgainLater, "the kubelet retries; checkpointd reads this node's placement entries as soon as the API server answers, "+
			"then the store is created with the reservations they list; on a node without checkpointd, set ipam.newStoreWait to 0s (docs/troubleshooting.md, \"Error 11\")"
	case errors.Is(err, ipam.ErrRangeRetired):
		code, hint = types.ErrTryAgainLater, "the node's pod CIDR changed; the kubelet retries until the network's configuration has the new range"
	case errors.Is(err, reservation.ErrLocked):
		code, hint = types.ErrTryAgainLater, "another stickyip process holds the store; raise ipam.lockTimeout if this persists"
	case errors.Is(err, ipam.ErrPoolExhausted):
		code, hint = CodePoolExhausted, "see `stickyip list` for who holds the addresses; `stickyip release NS/NAME` frees a reservation"
	case errors.Is(err, ipam.ErrIPUnavailable):
		code = CodeIPUnavailable
	case errors.Is(err, ipam.ErrNoAllocation):
		code = types.ErrUnknownContainer
	case errors.Is(err, reservation.ErrCorrupt), errors.Is(err, reservation.ErrFutureSchema):
		code, hint = CodeStoreUnreadable, "the file was not modified; run `stickyip check` for details, see docs/troubleshooting.md, \"Error 102\""
	case errors.Is(err, reservation.ErrLost):
		code, hint = CodeStoreUnreadable, "checkpointd rebuilds the store; see docs/troubleshooting.md, \"Error 102\""
	case errors.Is(err, reservation.ErrIO):
		code = types.ErrIOFailure
	}
	return types.NewError(code, "stickyip: "+err.Error(), hint)
}
