package lbtargets

import (
	"context"
	"errors"
	"sync"
	"time"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	"github.com/ironcore-dev/ironcore/utils/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
)

// selectorSettle is how long a selector waits to move once this process's cache shows its
// targets labelled (HoldSelector). Taking over from the reference CCM under load, IronCore's
// controller was seen up to a second behind.
const selectorSettle = 3 * time.Second

// HoldSelector keeps the existing selector in desired while the new one would drop an eligible
// destination of the routing, and reports whether it did. It reads nothing: it queues a check
// (syncSelector) and answers from the latest one. Once this cache shows the labels, the
// selector still stays for selectorSettle, as IronCore's own cache can be behind this one.
func (t *Controller) HoldSelector(existing, desired *networkingv1alpha1.LoadBalancer) (hold bool, settling time.Duration) {
	next := desired.Spec.NetworkInterfaceSelector
	if next == nil || equality.Semantic.DeepEqual(existing.Spec.NetworkInterfaceSelector, next) {
		t.moves.forget(existing.UID)
		return false, 0
	}
	move := t.moves.request(existing.UID, next)
	t.queue.Add(key{kind: selectorKind, name: existing.Name})
	settled := move.labelledSince.Add(selectorSettle)
	switch {
	case move.labelledSince.IsZero():
	case time.Now().Before(settled):
		settling = time.Until(settled)
	case !move.lastLabelled.Before(settled):
		// A check that began after the settling time still found every target labelled.
		t.moves.forget(existing.UID)
		return false, 0
	}
	desired.Spec.NetworkInterfaceSelector = existing.Spec.NetworkInterfaceSelector.DeepCopy()
	return true, settling
}

// selectorMoves are the selectors to move, by LoadBalancer UID.
type selectorMoves struct {
	mu    sync.Mutex
	moves map[types.UID]selectorMove
}

// selectorMove is a selector to move, with when checks first and last found its targets
// labelled (zero until they do).
type selectorMove struct {
	next                        *metav1.LabelSelector
	labelledSince, lastLabelled time.Time
}

// request records a move to next and returns it as the checks have found it.
func (m *selectorMoves) request(uid types.UID, next *metav1.LabelSelector) selectorMove {
	m.mu.Lock()
	defer m.mu.Unlock()
	move, found := m.moves[uid]
	if !found || !equality.Semantic.DeepEqual(move.next, next) {
		move = selectorMove{next: next.DeepCopy()}
	}
	if m.moves == nil {
		m.moves = map[types.UID]selectorMove{}
	}
	m.moves[uid] = move
	return move
}

func (m *selectorMoves) get(uid types.UID) (selectorMove, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	move, found := m.moves[uid]
	return move, found
}

// checked records what a check of the move to next that began at began found, unless the move
// changed meanwhile.
func (m *selectorMoves) checked(uid types.UID, next *metav1.LabelSelector, labelled bool, began time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	move, found := m.moves[uid]
	switch {
	case !found || !equality.Semantic.DeepEqual(move.next, next):
		return
	case !labelled:
		move.labelledSince, move.lastLabelled = time.Time{}, time.Time{}
	case move.labelledSince.IsZero():
		move.labelledSince, move.lastLabelled = began, began
	default:
		move.lastLabelled = began
	}
	m.moves[uid] = move
}

func (m *selectorMoves) forget(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.moves, uid)
}

// syncSelector checks a selector move that HoldSelector recorded for the LoadBalancer.
func (t *Controller) syncSelector(ctx context.Context, lb *networkingv1alpha1.LoadBalancer) error {
	move, found := t.moves.get(lb.UID)
	if !found {
		return nil
	}
	began := time.Now()
	labelled, err := t.targetsLabelled(ctx, lb, move.next)
	if err != nil {
		return err
	}
	t.moves.checked(lb.UID, move.next, labelled, began)
	return nil
}

// targetsLabelled reports whether every NetworkInterface the routing of the existing
// LoadBalancer sends to, of an eligible Node, matches the next selector in this cache.
func (t *Controller) targetsLabelled(ctx context.Context, existing *networkingv1alpha1.LoadBalancer, next *metav1.LabelSelector) (bool, error) {
	selector, err := metav1.LabelSelectorAsSelector(next)
	if err != nil {
		return false, err
	}
	if !t.ironcore.HasSynced() {
		// An empty cache finds no target to wait for: the selector would move to labels that
		// do not exist yet and empty the routing.
		klog.V(2).InfoS("Keeping the NetworkInterface selector of a LoadBalancer until the IronCore cache has synced", "loadBalancer", klog.KObj(existing))
		return false, nil
	}
	// The cache keeps no destinations (routingsummary.go).
	routing, err := t.ironcore.LiveLoadBalancerRouting(ctx, existing.Name)
	if errors.Is(err, ironcore.ErrNotFound) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	routed := map[string]bool{}
	for _, destination := range routing.Destinations {
		if destination.TargetRef != nil {
			routed[destination.TargetRef.Name] = true
		}
	}
	eligible, err := t.EligibleNetworkInterfaces(ctx, routed)
	if err != nil {
		return false, err
	}
	for _, destination := range routing.Destinations {
		if destination.TargetRef == nil || !eligible[destination.TargetRef.Name] {
			continue
		}
		// The cache, not this process's own writes, decides: IronCore selects by what it sees.
		nic, err := t.ironcore.NetworkInterface(ctx, destination.TargetRef.Name)
		if errors.Is(err, ironcore.ErrNotFound) {
			continue
		}
		if err != nil {
			return false, err
		}
		if !selector.Matches(labels.Set(nic.Labels)) {
			klog.V(2).InfoS("Keeping the NetworkInterface selector of a LoadBalancer until its targets are labelled",
				"loadBalancer", klog.KObj(existing), "networkInterface", klog.KObj(nic))
			return false, nil
		}
	}
	return true, nil
}
