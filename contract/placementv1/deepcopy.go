package placementv1

import "k8s.io/apimachinery/pkg/runtime"

// DeepCopyInto copies e into out.
func (e *Entry) DeepCopyInto(out *Entry) {
	*out = *e
	e.Since.DeepCopyInto(&out.Since)
	if e.Until != nil {
		out.Until = e.Until.DeepCopy()
	}
	out.Addresses = append([]string(nil), e.Addresses...)
}

// DeepCopyInto copies c into out.
func (c *Claim) DeepCopyInto(out *Claim) {
	*out = *c
	c.Created.DeepCopyInto(&out.Created)
	if c.StatefulSet != nil {
		r := *c.StatefulSet
		out.StatefulSet = &r
	}
}

// DeepCopy returns a copy of r.
func (r *NodeRecord) DeepCopy() *NodeRecord {
	if r == nil {
		return nil
	}
	out := &NodeRecord{TypeMeta: r.TypeMeta}
	r.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec.NodeUID = r.Spec.NodeUID
	if r.Spec.Entries != nil {
		out.Spec.Entries = make([]Entry, len(r.Spec.Entries))
		for i := range r.Spec.Entries {
			r.Spec.Entries[i].DeepCopyInto(&out.Spec.Entries[i])
		}
	}
	out.Status.NodeUID, out.Status.ObservedGeneration = r.Status.NodeUID, r.Status.ObservedGeneration
	if r.Status.Claims != nil {
		out.Status.Claims = make([]Claim, len(r.Status.Claims))
		for i := range r.Status.Claims {
			r.Status.Claims[i].DeepCopyInto(&out.Status.Claims[i])
		}
	}
	return out
}

// DeepCopyObject implements runtime.Object.
func (r *NodeRecord) DeepCopyObject() runtime.Object { return r.DeepCopy() }

// DeepCopyObject implements runtime.Object.
func (l *NodeRecordList) DeepCopyObject() runtime.Object {
	if l == nil {
		return nil
	}
	out := &NodeRecordList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]NodeRecord, len(l.Items))
		for i := range l.Items {
			out.Items[i] = *l.Items[i].DeepCopy()
		}
	}
	return out
}
