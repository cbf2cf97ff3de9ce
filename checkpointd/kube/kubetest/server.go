// Package kubetest is an API server for unit tests of checkpointd's API
// client: objects of the core/v1 resources (and the placement API's
// NodeRecords) kept in memory and served over HTTP as kube-apiserver
// serves them (get, list and watch with field selectors, the watch's
// initial events, create, and a JSON merge patch of a NodeRecord), so the
// tests run the client's real requests. Tests change the objects directly
// (Put, Delete) and may make the server refuse a verb on a resource.
package kubetest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/stickyip/stickyip/contract/placementv1"
)

// The server's own codecs and resource names, as Kubernetes has them: not
// the client's (kube.Codecs), so that a test sees what a real API server
// would send it.
var (
	coreScheme   = runtime.NewScheme()
	coreCodecs   = serializer.NewCodecFactory(coreScheme)
	recordScheme = runtime.NewScheme()
	recordCodecs = serializer.NewCodecFactory(recordScheme)
)

func init() {
	utilruntime.Must(corev1.AddToScheme(coreScheme))
	utilruntime.Must(placementv1.AddToScheme(recordScheme))
}

const (
	pods       = "pods"
	nodes      = "nodes"
	secrets    = "secrets"
	configMaps = "configmaps"
	events     = "events"
)

// Server is the API server.
type Server struct {
	*httptest.Server
	codec runtime.Codec
	recs  runtime.Codec // stickyip.io/v1: placementv1.NodeRecord

	mu       sync.Mutex
	rv       int
	objects  map[string]map[string]runtime.Object // resource → ns/name → object
	watchers map[*watcher]bool
	refused  map[string]int // verb/resource → HTTP status
	refusals int
	watches  int
	done     chan struct{}
}

type watcher struct {
	resource string
	sel      fields.Selector
	events   chan metav1.WatchEvent
}

// New starts a server holding objs; it stops when the test ends.
func New(t testing.TB, objs ...runtime.Object) *Server {
	s := &Server{codec: coreCodecs.LegacyCodec(corev1.SchemeGroupVersion), recs: recordCodecs.LegacyCodec(placementv1.SchemeGroupVersion), objects: map[string]map[string]runtime.Object{},
		watchers: map[*watcher]bool{}, refused: map[string]int{}, done: make(chan struct{})}
	for _, o := range objs {
		s.Put(o)
	}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(func() { close(s.done); s.Close() })
	return s
}

// Config is a client config for the server.
func (s *Server) Config() *rest.Config { return &rest.Config{Host: s.URL} }

// Refuse makes the server answer verb (get, list, watch, create, patch) on
// resource with code until told otherwise (code 0).
func (s *Server) Refuse(verb, resource string, code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refused[verb+"/"+resource] = code
}

// Refusals returns how many requests Refuse has refused.
func (s *Server) Refusals() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refusals
}

// Watches returns how many watches clients have opened.
func (s *Server) Watches() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.watches
}

// Put creates or replaces obj (a Pod, Node, Secret, ConfigMap, Event or
// placementv1.NodeRecord) and tells the watchers.
func (s *Server) Put(obj runtime.Object) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.put(obj)
}

func (s *Server) put(obj runtime.Object) (runtime.Object, watch.EventType) {
	obj = obj.DeepCopyObject()
	res := resourceOf(obj)
	m, _ := meta.Accessor(obj)
	s.rv++
	m.SetResourceVersion(strconv.Itoa(s.rv))
	if m.GetUID() == "" {
		m.SetUID(types.UID("uid-" + strconv.Itoa(s.rv)))
	}
	if s.objects[res] == nil {
		s.objects[res] = map[string]runtime.Object{}
	}
	key := m.GetNamespace() + "/" + m.GetName()
	typ := watch.Added
	if _, ok := s.objects[res][key]; ok {
		typ = watch.Modified
	}
	s.objects[res][key] = obj
	s.notify(res, typ, obj)
	return obj, typ
}

// Delete removes object ns/name of resource and tells the watchers.
func (s *Server) Delete(resource, ns, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	obj, ok := s.objects[resource][ns+"/"+name]
	if !ok {
		return
	}
	delete(s.objects[resource], ns+"/"+name)
	s.rv++
	s.notify(resource, watch.Deleted, obj)
}

// Objects returns the objects of resource.
func (s *Server) Objects(resource string) []runtime.Object {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []runtime.Object
	for _, o := range s.objects[resource] {
		out = append(out, o.DeepCopyObject())
	}
	return out
}

func (s *Server) notify(res string, typ watch.EventType, obj runtime.Object) {
	for w := range s.watchers {
		if w.resource == res && w.sel.Matches(fieldsOf(obj)) {
			select {
			case w.events <- s.event(typ, obj):
			default: // a watcher that does not keep up misses events, as a slow client's watch ends
			}
		}
	}
}

func (s *Server) event(typ watch.EventType, obj runtime.Object) metav1.WatchEvent {
	return metav1.WatchEvent{Type: string(typ), Object: runtime.RawExtension{Raw: []byte(runtime.EncodeOrDie(s.codecOf(obj), obj))}}
}

// codecOf is the codec of obj's API group.
func (s *Server) codecOf(obj runtime.Object) runtime.Codec {
	switch obj.(type) {
	case *placementv1.NodeRecord, *placementv1.NodeRecordList:
		return s.recs
	}
	return s.codec
}

// resourceOf names obj's resource.
func resourceOf(obj runtime.Object) string {
	switch obj.(type) {
	case *corev1.Pod:
		return pods
	case *corev1.Node:
		return nodes
	case *corev1.Secret:
		return secrets
	case *corev1.ConfigMap:
		return configMaps
	case *corev1.Event:
		return events
	case *placementv1.NodeRecord:
		return placementv1.NodeRecordResource
	}
	panic(fmt.Sprintf("kubetest: no resource for %T", obj))
}

// fieldsOf returns the fields of obj a field selector may name.
func fieldsOf(obj runtime.Object) fields.Set {
	m, _ := meta.Accessor(obj)
	set := fields.Set{"metadata.name": m.GetName(), "metadata.namespace": m.GetNamespace()}
	if p, ok := obj.(*corev1.Pod); ok {
		set["spec.nodeName"] = p.Spec.NodeName
		set["status.phase"] = string(p.Status.Phase)
	}
	return set
}
