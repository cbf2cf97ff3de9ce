package apitest

import (
	"encoding/json"
	"io"
	"net/http"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/stickyip/stickyip/contract/placementv1"
)

// patch applies a JSON merge patch: to a record's status alone through
// its status subresource, to the rest of the object (never a record's
// status) otherwise, as the API server does for a resource with a status
// subresource.
func (s *Server) patch(w http.ResponseWriter, req *http.Request, r request, target string) {
	if req.Header.Get("Content-Type") != string(types.MergePatchType) {
		status(w, http.StatusUnsupportedMediaType, "UnsupportedMediaType", "want a JSON merge patch")
		return
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		status(w, http.StatusBadRequest, "BadRequest", err.Error())
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := key(r.resource, r.namespace, r.name)
	cur, ok := s.objects[k]
	if !ok {
		status(w, http.StatusNotFound, "NotFound", r.name+" not found")
		return
	}
	merged, err := jsonpatch.MergePatch(encode(r.resource, cur), body)
	if err != nil {
		status(w, http.StatusBadRequest, "BadRequest", err.Error())
		return
	}
	var next object
	switch c := cur.(type) {
	case *placementv1.NodeRecord:
		n := &placementv1.NodeRecord{}
		if err := json.Unmarshal(merged, n); err != nil {
			status(w, http.StatusUnprocessableEntity, "Invalid", err.Error())
			return
		}
		keep := c.DeepCopy()
		if r.sub == "status" {
			keep.Status = n.Status
		} else {
			keep.Spec = n.Spec
		}
		next = keep
	}
	s.store(r.resource, next, true)
	s.writes["patch "+target]++
	reply(w, http.StatusOK, encode(r.resource, next))
}

func (s *Server) delete(w http.ResponseWriter, req *http.Request, r request) {
	var opts metav1.DeleteOptions
	if b, _ := io.ReadAll(req.Body); len(b) > 0 {
		if err := json.Unmarshal(b, &opts); err != nil {
			status(w, http.StatusBadRequest, "BadRequest", err.Error())
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := key(r.resource, r.namespace, r.name)
	cur, ok := s.objects[k]
	if !ok {
		status(w, http.StatusNotFound, "NotFound", r.name+" not found")
		return
	}
	if p := opts.Preconditions; p != nil && p.UID != nil && *p.UID != cur.GetUID() {
		status(w, http.StatusConflict, "Conflict", "precondition failed: UID in precondition: "+string(*p.UID)+", UID in object meta: "+string(cur.GetUID()))
		return
	}
	body := encode(r.resource, cur)
	s.remove(k, r.resource)
	s.writes["delete "+r.resource]++
	reply(w, http.StatusOK, body)
}
