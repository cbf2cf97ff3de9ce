package manager

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The former index: ConfigMaps stickyip-index-0 … -7 of each namespace,
// one data key per node (its name), one line per entry:
// "<identity> <pod> <seq> <since> <until> <ip>[,<ip>…]". Its policies let
// a node write only its own key, and a claim only for a pod bound to it.
const (
	formerPrefix = "stickyip-index-"
	formerShards = 8
)

// former answers, during an upgrade from the former index, whether a
// node's own line there backs an entry whose pod is gone: what the former
// policies checked when the line was written. It reads a namespace's
// former shards once every ttl (the pass's goroutine alone uses it). A
// 403 (the upgrade's RBAC removed) stops it for good.
type former struct {
	kube    kubernetes.Interface
	ttl     time.Duration
	log     *slog.Logger
	stopped bool
	byNS    map[string]*formerIndex
}

type formerIndex struct {
	at    time.Time
	lines map[string]map[string]bool // node → "<identity> <pod>"
}

func newFormer(kube kubernetes.Interface, ttl time.Duration, log *slog.Logger) *former {
	return &former{kube: kube, ttl: ttl, log: log, byNS: map[string]*formerIndex{}}
}

// backs reports whether node's line in namespace's former index names
// identity and pod.
func (f *former) backs(ctx context.Context, now time.Time, namespace, node, identity, pod string) bool {
	if f.stopped {
		return false
	}
	x := f.byNS[namespace]
	if x == nil || now.Sub(x.at) >= f.ttl {
		x = f.read(ctx, namespace, now)
		if x == nil {
			return false
		}
		f.byNS[namespace] = x
	}
	return x.lines[node][identity+" "+pod]
}

// read reads namespace's former shards (a missing one is empty); nil when
// they cannot be read now.
func (f *former) read(ctx context.Context, namespace string, now time.Time) *formerIndex {
	x := &formerIndex{at: now, lines: map[string]map[string]bool{}}
	for i := range formerShards {
		cm, err := f.kube.CoreV1().ConfigMaps(namespace).Get(ctx, fmt.Sprintf("%s%d", formerPrefix, i), metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			continue
		case apierrors.IsForbidden(err):
			f.stopped = true
			f.log.Info("import of the former index stopped: its shards may not be read", "err", err)
			return nil
		case err != nil:
			f.log.Warn("former index not read", "namespace", namespace, "err", err)
			return nil
		}
		for node, v := range cm.Data {
			for _, line := range strings.Split(v, "\n") {
				fields := strings.Split(line, " ")
				if len(fields) != 6 {
					continue
				}
				if x.lines[node] == nil {
					x.lines[node] = map[string]bool{}
				}
				x.lines[node][fields[0]+" "+fields[1]] = true
			}
		}
	}
	return x
}
