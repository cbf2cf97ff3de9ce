package loop

import "sync"

// Once remembers the last failure logged under each key (a step, a watch),
// so that a failure repeated pass after pass is logged once. The zero value
// is ready; it is safe for concurrent use.
type Once struct {
	mu   sync.Mutex
	last map[string]string
}

// Failed records msg as key's failure and reports whether it differs from
// the last one recorded: whether it is worth a log line.
func (o *Once) Failed(key, msg string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.last == nil {
		o.last = map[string]string{}
	}
	if prev, ok := o.last[key]; ok && prev == msg {
		return false
	}
	o.last[key] = msg
	return true
}

// Recovered forgets key's failure, so that the next one is logged, and
// reports whether there was one (whether recovery is worth a log line).
func (o *Once) Recovered(key string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, had := o.last[key]
	delete(o.last, key)
	return had
}
