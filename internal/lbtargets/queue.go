package lbtargets

import (
	"fmt"
	"slices"

	"k8s.io/client-go/util/workqueue"
)

// key is one item of the controller's queue: what to sync.
type key struct {
	kind keyKind
	// name is a Service's namespace/name (routing and verify keys), a Node's name (node and
	// graceEnd keys) or a LoadBalancer's name (retained and selector keys); empty for the
	// others.
	name string
	// attempt tells a Service's verify keys apart, so that each waits for its own delay.
	attempt int
}

// String names the key in logs: its kind, then its name and attempt where it has them.
func (k key) String() string {
	s := k.kind.String()
	if k.name != "" {
		s += " " + k.name
	}
	if k.attempt > 0 {
		s += fmt.Sprintf(" (attempt %d)", k.attempt)
	}
	return s
}

// keyKind is what a key stands for.
type keyKind uint8

const (
	// routingKind: the Service's LoadBalancerRouting (routing.go).
	routingKind keyKind = iota + 1
	// labelsKind: the target labels of every selecting LoadBalancer (labels.go).
	labelsKind
	// nudgeKind: nudging IronCore for the targets the last label sync left (nudge.go).
	nudgeKind
	// nodeKind: record the Node's verdict (nodes.go).
	nodeKind
	// graceEndKind: the Node's NotReady grace period ends; its verdict and every target.
	graceEndKind
	// verifyKind: compare the Service's routing with the one on the API server, then sync it.
	verifyKind
	// retainedKind: the routing of a LoadBalancer retained after its Service, emptied.
	retainedKind
	// selectorKind: check a selector move of the named LoadBalancer (selector.go).
	selectorKind
)

func (k keyKind) String() string {
	switch k {
	case routingKind:
		return "routing"
	case labelsKind:
		return "labels"
	case nudgeKind:
		return "nudge"
	case nodeKind:
		return "node"
	case graceEndKind:
		return "grace end"
	case verifyKind:
		return "verify"
	case retainedKind:
		return "retained"
	case selectorKind:
		return "selector"
	}
	return fmt.Sprintf("kind %d", uint8(k))
}

// routingKey is the key of the routing of the Service with the namespace/name.
func routingKey(name string) key { return key{kind: routingKind, name: name} }

// serviceName is the namespace/name of a Service, the name of its routing key.
func serviceName(namespace, name string) string { return namespace + "/" + name }

// firstQueue hands out the routing keys of Services waiting for their first traffic before
// every other key. When Nodes join, every routing is queued to be rewritten, and a new Service
// would otherwise wait behind all of them, and its address with it.
//
// The workqueue calls it under its own lock, so first must not queue keys, and must be cheap;
// a key is judged when it is queued, and again when it is queued once more while it waits.
type firstQueue struct {
	first       func(key) bool
	firsts, all []key
}

var _ workqueue.Queue[key] = (*firstQueue)(nil)

func newFirstQueue(first func(key) bool) *firstQueue {
	return &firstQueue{first: first}
}

// Push queues a new key.
func (q *firstQueue) Push(k key) {
	if q.first(k) {
		q.firsts = append(q.firsts, k)
		return
	}
	q.all = append(q.all, k)
}

// Touch moves a waiting key that has come to wait for its first traffic ahead.
func (q *firstQueue) Touch(k key) {
	if !q.first(k) {
		return
	}
	if i := slices.Index(q.all, k); i >= 0 {
		q.all = slices.Delete(q.all, i, i+1)
		q.firsts = append(q.firsts, k)
	}
}

// Len is how many keys wait.
func (q *firstQueue) Len() int { return len(q.firsts) + len(q.all) }

// Pop hands out the next key; the workqueue calls it only while a key waits.
func (q *firstQueue) Pop() key {
	from := &q.all
	if len(q.firsts) > 0 {
		from = &q.firsts
	}
	k := (*from)[0]
	(*from)[0] = key{}
	*from = (*from)[1:]
	return k
}
