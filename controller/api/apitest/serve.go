package apitest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stickyip/stickyip/contract/placementv1"
)

// request is a request's path, read.
type request struct {
	namespace, resource, name, sub string
}

func parse(path string) (request, bool) {
	rest, ok := strings.CutPrefix(path, "/apis/"+placementv1.SchemeGroupVersion.String()+"/")
	if !ok {
		return request{}, false
	}
	p := strings.Split(rest, "/")
	var r request
	if p[0] == "namespaces" && len(p) >= 3 {
		r.namespace, p = p[1], p[2:]
	}
	r.resource = p[0]
	if len(p) > 1 {
		r.name = p[1]
	}
	if len(p) > 2 {
		r.sub = p[2]
	}
	ok = r.resource == Records && r.namespace == ""
	return r, ok && len(p) <= 3
}

func (s *Server) serve(w http.ResponseWriter, req *http.Request) {
	r, ok := parse(req.URL.Path)
	if !ok {
		status(w, http.StatusNotFound, "NotFound", "no such path "+req.URL.Path)
		return
	}
	verb := map[string]string{http.MethodGet: "get", http.MethodPost: "create", http.MethodPatch: "patch", http.MethodDelete: "delete"}[req.Method]
	target := r.resource
	if r.sub != "" {
		target += "/" + r.sub
	}
	s.mu.Lock()
	code := s.fail[verb+" "+target]
	s.mu.Unlock()
	if code != 0 {
		status(w, code, "InternalError", "refused by the test")
		return
	}
	switch {
	case verb == "get" && r.name == "" && req.URL.Query().Get("watch") == "true":
		s.watch(w, req, r)
	case verb == "get" && r.name == "":
		s.list(w, r)
	case verb == "get":
		s.get(w, r)
	case verb == "patch" && r.name != "":
		s.patch(w, req, r, target)
	case verb == "delete" && r.name != "" && r.sub == "":
		s.delete(w, req, r)
	default:
		status(w, http.StatusMethodNotAllowed, "MethodNotAllowed", req.Method+" "+req.URL.Path)
	}
}

func status(w http.ResponseWriter, code int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusFailure, Code: int32(code), Reason: metav1.StatusReason(reason), Message: msg})
}

func reply(w http.ResponseWriter, code int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

func (s *Server) list(w http.ResponseWriter, r request) {
	s.mu.Lock()
	var items []json.RawMessage
	prefix := key(r.resource, r.namespace, "")
	if r.namespace == "" {
		prefix = r.resource + "/"
	}
	for k, o := range s.objects {
		if strings.HasPrefix(k, prefix) {
			items = append(items, encode(r.resource, o))
		}
	}
	rv := s.rv
	s.mu.Unlock()
	kind := map[string]string{Records: "NodeRecordList"}[r.resource]
	b, _ := json.Marshal(map[string]any{"apiVersion": placementv1.SchemeGroupVersion.String(), "kind": kind,
		"metadata": map[string]string{"resourceVersion": strconv.Itoa(rv)}, "items": append([]json.RawMessage{}, items...)})
	reply(w, http.StatusOK, b)
}

func (s *Server) get(w http.ResponseWriter, r request) {
	s.mu.Lock()
	o, ok := s.objects[key(r.resource, r.namespace, r.name)]
	var b []byte
	if ok {
		b = encode(r.resource, o)
	}
	s.mu.Unlock()
	if !ok {
		status(w, http.StatusNotFound, "NotFound", r.name+" not found")
		return
	}
	reply(w, http.StatusOK, b)
}

// watch streams the events after the request's resourceVersion until the
// client goes or the server stops. A server without the watch's initial
// events (sendInitialEvents) makes the informer list first, as
// kube-apiserver with the WatchList feature off does.
func (s *Server) watch(w http.ResponseWriter, req *http.Request, r request) {
	q := req.URL.Query()
	if q.Get("sendInitialEvents") == "true" {
		status(w, http.StatusUnprocessableEntity, "Invalid", "sendInitialEvents is not supported")
		return
	}
	from, _ := strconv.Atoi(q.Get("resourceVersion"))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	if flusher != nil {
		flusher.Flush()
	}
	go func() { // wake the loop below when the client goes
		<-req.Context().Done()
		s.mu.Lock()
		s.changed.Broadcast()
		s.mu.Unlock()
	}()
	sent := 0
	s.mu.Lock()
	defer s.mu.Unlock()
	for !s.closed && req.Context().Err() == nil {
		if sent == len(s.events) {
			s.changed.Wait()
			continue
		}
		e := s.events[sent]
		sent++
		if e.rv <= from || e.resource != r.resource || !inNamespace(e.body, r.namespace) {
			continue
		}
		line := fmt.Sprintf("{\"type\":%q,\"object\":%s}\n", e.kind, e.body)
		s.mu.Unlock()
		_, err := io.WriteString(w, line)
		if flusher != nil {
			flusher.Flush()
		}
		s.mu.Lock()
		if err != nil {
			return
		}
	}
}

func inNamespace(body []byte, namespace string) bool {
	if namespace == "" {
		return true
	}
	var m struct {
		Metadata struct{ Namespace string } `json:"metadata"`
	}
	_ = json.Unmarshal(body, &m)
	return m.Metadata.Namespace == namespace
}
