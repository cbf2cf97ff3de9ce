package manager

import (
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/stickyip/stickyip/contract/placementv1"
	"github.com/stickyip/stickyip/controller/api"
)

// ReasonClaimRefused is the reason of the Event on a NodeRecord whose claim
// the controller refused.
const ReasonClaimRefused = "ClaimRefused"

// eventer sends the ClaimRefused Events: at most one per node and rule
// every interval, so that a node listing made-up claims costs the API
// server a few Events, not one per claim.
type eventer struct {
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder
	interval    time.Duration

	mu   sync.Mutex
	last map[[2]string]time.Time // node, rule → last Event
}

func newEventer(kube kubernetes.Interface, interval time.Duration) *eventer {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	return &eventer{broadcaster: b, recorder: b.NewRecorder(api.Scheme, corev1.EventSource{Component: "stickyip-controller"}),
		interval: interval, last: map[[2]string]time.Time{}}
}

// refused sends the Events of refusals on rec (one per rule, naming how
// many more the same rule refused).
func (e *eventer) refused(rec *placementv1.NodeRecord, refusals []refusal, now time.Time) {
	byRule := map[string][]refusal{}
	var rules []string
	for _, r := range refusals {
		if byRule[r.rule] == nil {
			rules = append(rules, r.rule)
		}
		byRule[r.rule] = append(byRule[r.rule], r)
	}
	for _, rule := range rules {
		k := [2]string{rec.Name, rule}
		e.mu.Lock()
		last, ok := e.last[k]
		send := !ok || now.Sub(last) >= e.interval
		if send {
			e.last[k] = now
		}
		e.mu.Unlock()
		if !send {
			continue
		}
		msg := byRule[rule][0].message
		if n := len(byRule[rule]) - 1; n > 0 {
			msg += fmt.Sprintf(" (and %d more for the same reason)", n)
		}
		e.recorder.Event(rec, corev1.EventTypeWarning, ReasonClaimRefused, msg)
	}
}

func (e *eventer) stop() { e.broadcaster.Shutdown() }
