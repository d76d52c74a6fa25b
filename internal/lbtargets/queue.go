package lbtargets

import (
	"slices"

	"k8s.io/client-go/util/workqueue"
)

// firstQueue is the order in which the controller's workqueue hands out its keys: the routing
// keys of Services that wait for their first traffic go before every other key, each kind in
// the order it came. When Nodes join, every Service's routing is queued to be rewritten; a new
// Service, whose routing is not written at all yet, would otherwise wait behind all of them,
// and its address with it (an address is shown only once the routing holds a Node).
//
// The workqueue calls it under its own lock, so first must not queue keys, and must be cheap;
// a key is judged when it is queued, and again when it is queued once more while it waits.
type firstQueue struct {
	first       func(key string) bool
	firsts, all []string
}

var _ workqueue.Queue[string] = (*firstQueue)(nil)

func newFirstQueue(first func(key string) bool) *firstQueue {
	return &firstQueue{first: first}
}

// Push queues a new key.
func (q *firstQueue) Push(key string) {
	if q.first(key) {
		q.firsts = append(q.firsts, key)
		return
	}
	q.all = append(q.all, key)
}

// Touch moves a waiting key that has come to wait for its first traffic ahead.
func (q *firstQueue) Touch(key string) {
	if !q.first(key) {
		return
	}
	if i := slices.Index(q.all, key); i >= 0 {
		q.all = slices.Delete(q.all, i, i+1)
		q.firsts = append(q.firsts, key)
	}
}

// Len is how many keys wait.
func (q *firstQueue) Len() int { return len(q.firsts) + len(q.all) }

// Pop hands out the next key; the workqueue calls it only while a key waits.
func (q *firstQueue) Pop() string {
	from := &q.all
	if len(q.firsts) > 0 {
		from = &q.firsts
	}
	key := (*from)[0]
	(*from)[0] = ""
	*from = (*from)[1:]
	return key
}
