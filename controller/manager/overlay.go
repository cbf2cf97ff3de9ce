package manager

import (
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
)

// overlay keeps what the controller's own writes returned until its
// informer shows them (or something newer): a pass that follows a write
// compares with what it wrote, not with the informer's older copy, and so
// does not write the same again. Resource versions are compared as
// integers (k8s.io/apimachinery/pkg/util/resourceversion); one that is not
// one trusts the informer.
type overlay[T metav1.Object] struct {
	mu    sync.Mutex
	wrote map[string]T
	gone  map[string]types.UID
}

func newOverlay[T metav1.Object]() *overlay[T] {
	return &overlay[T]{wrote: map[string]T{}, gone: map[string]types.UID{}}
}

// put keeps obj, which a write of key returned.
func (o *overlay[T]) put(key string, obj T) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.wrote[key] = obj
	delete(o.gone, key)
}

// deleted notes that the controller deleted key, of uid.
func (o *overlay[T]) deleted(key string, uid types.UID) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.wrote, key)
	o.gone[key] = uid
}

// forget drops what is kept of key, of uid: the informer saw it deleted.
func (o *overlay[T]) forget(key string, uid types.UID) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if w, ok := o.wrote[key]; ok && w.GetUID() == uid {
		delete(o.wrote, key)
	}
	if o.gone[key] == uid {
		delete(o.gone, key)
	}
}

// view returns key as the controller knows it: cached (the informer's,
// ok: it has one), unless a write of the controller is newer.
func (o *overlay[T]) view(key string, cached T, ok bool) (T, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var zero T
	if uid, g := o.gone[key]; g {
		if ok && cached.GetUID() == uid {
			return zero, false
		}
		delete(o.gone, key)
	}
	w, has := o.wrote[key]
	if !has {
		return cached, ok
	}
	if ok {
		c, err := resourceversion.CompareResourceVersion(cached.GetResourceVersion(), w.GetResourceVersion())
		if err != nil || c >= 0 {
			delete(o.wrote, key)
			return cached, ok
		}
	}
	return w, true
}

// extra returns the kept objects whose keys match and are not in known:
// created by the controller, not yet in the informer.
func (o *overlay[T]) extra(match func(key string) bool, known map[string]bool) map[string]T {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string]T{}
	for k, w := range o.wrote {
		if match(k) && !known[k] {
			out[k] = w
		}
	}
	return out
}

// reset forgets everything (a new term starts from the informers).
func (o *overlay[T]) reset() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.wrote, o.gone = map[string]T{}, map[string]types.UID{}
}
