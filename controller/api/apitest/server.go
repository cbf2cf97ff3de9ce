// Package apitest is an API server of the placement API (stickyip.io/v1)
// for unit tests of stickyip-controller: NodeRecords kept in memory and
// served over HTTP as kube-apiserver serves custom resources (list, watch
// from a resourceVersion, get, JSON merge patch of the object or of its
// status subresource, delete with a UID precondition), so that the tests
// run the controller's real requests. Tests change records directly, as
// nodes would (PutRecord, DeleteRecord), read what the controller wrote
// (Record, Writes), and may make the server fail a verb.
package apitest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/stickyip/stickyip/contract/placementv1"
)

// Server is the API server.
type Server struct {
	*httptest.Server

	mu      sync.Mutex
	changed *sync.Cond
	rv      int
	uids    int
	objects map[string]object // resource/namespace/name → object
	events  []event           // every change, in resourceVersion order
	writes  map[string]int    // "verb resource[/subresource]" → count
	fail    map[string]int    // "verb resource[/subresource]" → HTTP status
	closed  bool
}

type object interface {
	metav1.Object
}

type event struct {
	rv       int
	resource string
	kind     string // ADDED, MODIFIED, DELETED
	body     []byte
}

// The resources as keys of Writes and Fail.
const (
	Records       = placementv1.NodeRecordResource
	RecordsStatus = placementv1.NodeRecordResource + "/status"
)

// New starts a server; it stops when the test ends.
func New(t testing.TB) *Server {
	s := &Server{objects: map[string]object{}, writes: map[string]int{}, fail: map[string]int{}}
	s.changed = sync.NewCond(&s.mu)
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(func() {
		s.mu.Lock()
		s.closed = true
		s.changed.Broadcast()
		s.mu.Unlock()
		s.Server.CloseClientConnections()
		s.Server.Close()
	})
	return s
}

// Config is a client configuration for the server.
func (s *Server) Config() *rest.Config { return &rest.Config{Host: s.URL, QPS: -1} }

func key(resource, namespace, name string) string { return resource + "/" + namespace + "/" + name }

// Writes returns how many requests of verb ("create", "patch", "delete")
// on resource (Records, RecordsStatus) the server answered 2xx.
func (s *Server) Writes(verb, resource string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes[verb+" "+resource]
}

// AllWrites returns the number of successful writes of every kind.
func (s *Server) AllWrites() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.writes {
		n += c
	}
	return n
}

// Fail makes verb on resource answer status (0: answer again).
func (s *Server) Fail(verb, resource string, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if status == 0 {
		delete(s.fail, verb+" "+resource)
		return
	}
	s.fail[verb+" "+resource] = status
}

// PutRecord writes a record's spec as its node would (creating it): its
// generation grows when the spec changes; its status stays.
func (s *Server) PutRecord(r *placementv1.NodeRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := key(Records, "", r.Name)
	cur, ok := s.objects[k].(*placementv1.NodeRecord)
	n := r.DeepCopy()
	if ok {
		n.ObjectMeta, n.Status = cur.ObjectMeta, cur.Status
		if !jsonEqual(cur.Spec, n.Spec) {
			n.Generation++
		}
	} else {
		n.Status = placementv1.NodeRecordStatus{}
		s.created(n, "")
		n.Generation = 1
	}
	s.store(Records, n, ok)
}

// DeleteRecord deletes a record as its node (or an operator) would.
func (s *Server) DeleteRecord(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.remove(key(Records, "", name), Records)
}

// Record returns a copy of record name (nil: none).
func (s *Server) Record(name string) *placementv1.NodeRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.objects[key(Records, "", name)].(*placementv1.NodeRecord); ok {
		return r.DeepCopy()
	}
	return nil
}

// created gives a new object its UID and creation time.
func (s *Server) created(o object, namespace string) {
	s.uids++
	o.SetUID(types.UID(fmt.Sprintf("uid-%d", s.uids)))
	o.SetCreationTimestamp(metav1.NewTime(time.Now().Truncate(time.Second)))
	o.SetNamespace(namespace)
}

// store keeps o as the newest version, and tells the watches.
func (s *Server) store(resource string, o object, existed bool) {
	s.rv++
	o.SetResourceVersion(strconv.Itoa(s.rv))
	s.objects[key(resource, o.GetNamespace(), o.GetName())] = o
	kind := "ADDED"
	if existed {
		kind = "MODIFIED"
	}
	s.events = append(s.events, event{rv: s.rv, resource: resource, kind: kind, body: encode(resource, o)})
	s.changed.Broadcast()
}

func (s *Server) remove(k, resource string) bool {
	o, ok := s.objects[k]
	if !ok {
		return false
	}
	delete(s.objects, k)
	s.rv++
	s.events = append(s.events, event{rv: s.rv, resource: resource, kind: "DELETED", body: encode(resource, o)})
	s.changed.Broadcast()
	return true
}

// encode is o's JSON, with its kind.
func encode(resource string, o object) []byte {
	switch x := o.(type) {
	case *placementv1.NodeRecord:
		x.TypeMeta = metav1.TypeMeta{APIVersion: placementv1.SchemeGroupVersion.String(), Kind: placementv1.NodeRecordKind}
	}
	b, err := json.Marshal(o)
	if err != nil {
		panic(err)
	}
	return b
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}
