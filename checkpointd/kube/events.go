package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stickyip/stickyip/contract"
)

// Event queue bounds: an Event is posted in the background, so that a pass
// never waits for the API server; beyond eventQueue unposted Events the
// newest are dropped (logged). Stop gives those still queued stopFlush.
const (
	eventQueue = 256
	stopFlush  = 2 * time.Second
	// maxMessage is the longest Event message posted (the API server's
	// limit for events.k8s.io, which core/v1 readers also show).
	maxMessage = 1024
)

// Recorder posts Events about pods and the node, as component
// "checkpointd" on the node. The node's own identity may create them (the
// Node authorizer's rules). Callers post each Event once (they remember
// what they said), so nothing is aggregated here.
type Recorder struct {
	cs      *REST
	node    string
	timeout time.Duration
	log     *slog.Logger
	now     func() time.Time

	queue   chan *corev1.Event
	stop    chan struct{}
	done    chan struct{}
	stopped sync.Once
}

// NewRecorder starts posting Events through cs, each request bounded by
// timeout.
func NewRecorder(cs *REST, node string, timeout time.Duration, log *slog.Logger) *Recorder {
	r := &Recorder{cs: cs, node: node, timeout: timeout, log: log, now: time.Now,
		queue: make(chan *corev1.Event, eventQueue), stop: make(chan struct{}), done: make(chan struct{})}
	go r.run()
	return r
}

// Event posts an Event on pod (only its reference is used).
func (r *Recorder) Event(pod *corev1.Pod, eventType, reason, message string) {
	r.post(&corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}, eventType, reason, message)
}

// NodeEvent posts an Event on node (only its reference is used).
func (r *Recorder) NodeEvent(node *corev1.Node, eventType, reason, message string) {
	r.post(&corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node.Name, UID: node.UID}, eventType, reason, message)
}

// post queues the Event, as client-go's recorder makes it: named
// <object>.<time in hex nanoseconds>, in the object's namespace (a Node's:
// default), with the source and the reporting controller.
func (r *Recorder) post(ref *corev1.ObjectReference, eventType, reason, message string) {
	now := metav1.NewTime(r.now())
	ns := ref.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", ref.Name, now.UnixNano()), Namespace: ns},
		InvolvedObject: *ref,
		Reason:         reason,
		Message:        contract.Clip(message, maxMessage-len("…")),
		FirstTimestamp: now,
		LastTimestamp:  now,
		Count:          1,
		Type:           eventType,
		Source:         corev1.EventSource{Component: "checkpointd", Host: r.node},

		ReportingController: "checkpointd",
		ReportingInstance:   r.node,
	}
	select {
	case r.queue <- ev:
	default:
		r.log.Warn("Event dropped: too many not posted yet", "object", ref.Kind+" "+ref.Namespace+"/"+ref.Name, "reason", reason)
	}
}

// run posts queued Events until Stop, then those left for up to stopFlush.
func (r *Recorder) run() {
	defer close(r.done)
	for {
		select {
		case ev := <-r.queue:
			r.send(context.Background(), ev)
		case <-r.stop:
			ctx, cancel := context.WithTimeout(context.Background(), stopFlush)
			defer cancel()
			for {
				select {
				case ev := <-r.queue:
					if ctx.Err() == nil {
						r.send(ctx, ev)
					}
				default:
					return
				}
			}
		}
	}
}

// send posts ev, trying again (up to sendTries, 1 s apart, doubling) while
// the API server cannot be reached or answers that it cannot take it now;
// not once Stop is called.
func (r *Recorder) send(ctx context.Context, ev *corev1.Event) {
	wait := time.Second
	for try := 1; ; try++ {
		err := r.create(ctx, ev)
		if err == nil {
			return
		}
		if try == sendTries || !transient(err) {
			r.log.Warn("Event not posted", "object", ev.InvolvedObject.Kind+" "+ev.InvolvedObject.Namespace+"/"+ev.InvolvedObject.Name,
				"reason", ev.Reason, "tries", try, "err", err)
			return
		}
		select {
		case <-time.After(wait):
			wait *= 2
		case <-r.stop:
			try = sendTries - 1 // one last try
		case <-ctx.Done():
			return
		}
	}
}

// sendTries bounds the tries of one Event.
const sendTries = 4

func (r *Recorder) create(ctx context.Context, ev *corev1.Event) error {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	return r.cs.Create(ctx, Events, ev.Namespace, ev, metav1.CreateOptions{}, &corev1.Event{})
}

// transient reports whether a failed post may succeed later: no answer, or
// one that says so (429, 5xx).
func transient(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return true
	}
	code := status.Status().Code
	return code == 429 || code >= 500
}

// Stop posts what is queued (for at most stopFlush) and stops.
func (r *Recorder) Stop() {
	r.stopped.Do(func() { close(r.stop) })
	<-r.done
}
