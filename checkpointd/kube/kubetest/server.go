// Package kubetest is an API server for unit tests of checkpointd's API
// client: objects of the core/v1 resources (and the placement API's
// NodeRecords) kept in memory and served over HTTP as kube-apiserver
// serves them (get, list and watch with field selectors, the watch's
// initial events, create, and a JSON merge patch of a NodeRecord), so the
// tests run the client's real requests. Tests change the objects directly
// (Put, Delete) and may make the server refuse a verb on a resource.
package kubetest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
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

// serve answers /readyz and /api/v1/[namespaces/NS/]RESOURCE[/NAME] (and
// /apis/stickyip.io/v1/noderecords[/NAME]).
func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/readyz" {
		fmt.Fprint(w, "ok")
		return
	}
	path, recs := strings.CutPrefix(r.URL.Path, "/apis/"+placementv1.Group+"/"+placementv1.Version)
	if !recs {
		path = strings.TrimPrefix(path, "/api/v1")
	}
	parts := strings.Split(strings.Trim(path, "/"), "/")
	ns := ""
	if len(parts) >= 3 && parts[0] == "namespaces" {
		ns, parts = parts[1], parts[2:]
	}
	if len(parts) == 0 || len(parts) > 2 || parts[0] == "" {
		s.status(w, apierrors.NewNotFound(schema.GroupResource{}, r.URL.Path))
		return
	}
	res, name := parts[0], ""
	if len(parts) == 2 {
		name = parts[1]
	}
	if recs != (res == placementv1.NodeRecordResource) {
		s.status(w, apierrors.NewNotFound(schema.GroupResource{}, r.URL.Path))
		return
	}
	q := r.URL.Query()
	verb := map[string]string{http.MethodGet: "get", http.MethodPost: "create", http.MethodPatch: "patch"}[r.Method]
	switch {
	case verb == "get" && name == "" && q.Get("watch") == "true":
		verb = "watch"
	case verb == "get" && name == "":
		verb = "list"
	case verb == "":
		s.status(w, apierrors.NewMethodNotSupported(schema.GroupResource{Resource: res}, r.Method))
		return
	}
	s.mu.Lock()
	code := s.refused[verb+"/"+res]
	if code != 0 {
		s.refusals++
	}
	s.mu.Unlock()
	if code != 0 {
		s.status(w, &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: int32(code),
			Reason: metav1.StatusReason(http.StatusText(code)), Message: "kubetest: " + verb + " " + res + " refused"}})
		return
	}
	sel, err := fields.ParseSelector(q.Get("fieldSelector"))
	if err != nil {
		s.status(w, apierrors.NewBadRequest(err.Error()))
		return
	}
	switch verb {
	case "get":
		s.get(w, res, ns, name)
	case "list":
		s.list(w, res, ns, sel)
	case "watch":
		s.watch(w, r, res, ns, sel, q.Get("sendInitialEvents") == "true")
	case "create":
		s.create(w, r, res, ns)
	case "patch":
		s.patch(w, r, res, ns, name)
	}
}

func (s *Server) get(w http.ResponseWriter, res, ns, name string) {
	s.mu.Lock()
	obj, ok := s.objects[res][ns+"/"+name]
	s.mu.Unlock()
	if !ok {
		s.status(w, apierrors.NewNotFound(schema.GroupResource{Resource: res}, name))
		return
	}
	s.write(w, http.StatusOK, obj)
}

// matching returns the objects of res in ns ("": all) that sel picks.
func (s *Server) matching(res, ns string, sel fields.Selector) []runtime.Object {
	var out []runtime.Object
	for _, o := range s.objects[res] {
		m, _ := meta.Accessor(o)
		if (ns == "" || m.GetNamespace() == ns) && sel.Matches(fieldsOf(o)) {
			out = append(out, o)
		}
	}
	return out
}

func (s *Server) list(w http.ResponseWriter, res, ns string, sel fields.Selector) {
	s.mu.Lock()
	items := s.matching(res, ns, sel)
	rv := strconv.Itoa(s.rv)
	s.mu.Unlock()
	var list runtime.Object
	switch res {
	case pods:
		l := &corev1.PodList{}
		for _, o := range items {
			l.Items = append(l.Items, *o.(*corev1.Pod))
		}
		list = l
	case nodes:
		l := &corev1.NodeList{}
		for _, o := range items {
			l.Items = append(l.Items, *o.(*corev1.Node))
		}
		list = l
	case placementv1.NodeRecordResource:
		l := &placementv1.NodeRecordList{}
		for _, o := range items {
			l.Items = append(l.Items, *o.(*placementv1.NodeRecord))
		}
		list = l
	default:
		s.status(w, apierrors.NewMethodNotSupported(schema.GroupResource{Resource: res}, "list"))
		return
	}
	_ = meta.SetList(list, items)
	list.(metav1.ListInterface).SetResourceVersion(rv)
	s.write(w, http.StatusOK, list)
}

// watch streams the changes of the objects sel picks (first each of them
// as added, then a bookmark, when the client asks for initial events) until
// the client goes or the test ends.
func (s *Server) watch(w http.ResponseWriter, r *http.Request, res, ns string, sel fields.Selector, initial bool) {
	wt := &watcher{resource: res, sel: sel, events: make(chan metav1.WatchEvent, 1000)}
	s.mu.Lock()
	s.watches++
	if initial {
		for _, o := range s.matching(res, ns, sel) {
			wt.events <- s.event(watch.Added, o)
		}
		mark := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{ResourceVersion: strconv.Itoa(s.rv),
			Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
		switch res {
		case nodes:
			wt.events <- s.event(watch.Bookmark, &corev1.Node{ObjectMeta: mark.ObjectMeta})
		case placementv1.NodeRecordResource:
			wt.events <- s.event(watch.Bookmark, &placementv1.NodeRecord{ObjectMeta: mark.ObjectMeta})
		default:
			wt.events <- s.event(watch.Bookmark, mark)
		}
	}
	s.watchers[wt] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.watchers, wt)
		s.mu.Unlock()
	}()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	enc := json.NewEncoder(w)
	for {
		select {
		case ev := <-wt.events:
			if enc.Encode(ev) != nil {
				return
			}
			w.(http.Flusher).Flush()
		case <-r.Context().Done():
			return
		case <-s.done:
			return
		}
	}
}

func (s *Server) create(w http.ResponseWriter, r *http.Request, res, ns string) {
	body, err := io.ReadAll(r.Body)
	if err == nil {
		var obj runtime.Object
		obj, err = s.decode(res, body)
		if err == nil && resourceOf(obj) != res {
			err = fmt.Errorf("a %T posted to %s", obj, res)
		}
		if err == nil {
			m, _ := meta.Accessor(obj)
			m.SetNamespace(ns)
			s.mu.Lock()
			_, exists := s.objects[res][ns+"/"+m.GetName()]
			if !exists {
				obj, _ = s.put(obj)
			}
			s.mu.Unlock()
			if exists {
				s.status(w, apierrors.NewAlreadyExists(schema.GroupResource{Resource: res}, m.GetName()))
				return
			}
			s.write(w, http.StatusCreated, obj)
			return
		}
	}
	s.status(w, apierrors.NewBadRequest(err.Error()))
}

// decode reads a posted object of res.
func (s *Server) decode(res string, body []byte) (runtime.Object, error) {
	if res == placementv1.NodeRecordResource {
		obj, _, err := recordCodecs.UniversalDeserializer().Decode(body, nil, nil)
		return obj, err
	}
	obj, _, err := coreCodecs.UniversalDeserializer().Decode(body, nil, nil)
	return obj, err
}

// patch applies a JSON merge patch to an object, as the API server does;
// a NodeRecord's status is not the main resource's to change.
func (s *Server) patch(w http.ResponseWriter, r *http.Request, res, ns, name string) {
	if r.Header.Get("Content-Type") != string(types.MergePatchType) {
		s.status(w, apierrors.NewMethodNotSupported(schema.GroupResource{Resource: res}, "patch"))
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		s.status(w, apierrors.NewBadRequest(err.Error()))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.objects[res][ns+"/"+name]
	if !ok {
		s.status(w, apierrors.NewNotFound(schema.GroupResource{Resource: res}, name))
		return
	}
	cur, err := json.Marshal(old)
	if err == nil {
		cur, err = jsonpatch.MergePatch(cur, body)
	}
	obj := reflect.New(reflect.TypeOf(old).Elem()).Interface().(runtime.Object)
	if err == nil {
		err = json.Unmarshal(cur, obj)
	}
	if err != nil {
		s.status(w, apierrors.NewBadRequest(err.Error()))
		return
	}
	if rec, ok := obj.(*placementv1.NodeRecord); ok {
		prev := old.(*placementv1.NodeRecord)
		rec.Status = prev.DeepCopy().Status
		rec.Generation = prev.Generation
		if !equalJSON(rec.Spec, prev.Spec) {
			rec.Generation++
		}
	}
	obj, _ = s.put(obj)
	s.write(w, http.StatusOK, obj)
}

// equalJSON reports whether a and b encode alike.
func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func (s *Server) write(w http.ResponseWriter, code int, obj runtime.Object) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = s.codecOf(obj).Encode(obj, w)
}

func (s *Server) status(w http.ResponseWriter, err *apierrors.StatusError) {
	st := err.ErrStatus
	st.Kind, st.APIVersion = "Status", "v1"
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(st.Code))
	_ = json.NewEncoder(w).Encode(st)
}
