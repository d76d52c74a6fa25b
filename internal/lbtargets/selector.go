package lbtargets

import (
	"context"
	"errors"
	"time"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	"github.com/ironcore-dev/ironcore/utils/equality"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
)

// selectorSettle is how long a selector waits to move once this process's cache shows its
// targets labelled (HoldSelector). Taking over from the reference CCM under load, IronCore's
// controller was seen up to a second behind.
const selectorSettle = 3 * time.Second

// HoldSelector keeps the existing LoadBalancer's NetworkInterface selector in desired while
// the new selector would drop a destination of its routing whose Node is eligible, and
// reports whether it did. The labels were just written, but IronCore (and this cache) see
// them a moment later; the Service is retried until they do. Once this cache shows them all,
// the selector still stays for selectorSettle (settling is what is left of it): IronCore's
// controller applies a selector to its own cache of NetworkInterfaces, which can be behind
// this one, and would route to none of the NetworkInterfaces it does not see labelled yet.
func (t *Controller) HoldSelector(ctx context.Context, existing, desired *networkingv1alpha1.LoadBalancer, nodes []*corev1.Node) (hold bool, settling time.Duration, err error) {
	next := desired.Spec.NetworkInterfaceSelector
	if next == nil || equality.Semantic.DeepEqual(existing.Spec.NetworkInterfaceSelector, next) {
		t.labelledSince.Delete(existing.UID)
		return false, 0, nil
	}
	keep := func() {
		desired.Spec.NetworkInterfaceSelector = existing.Spec.NetworkInterfaceSelector.DeepCopy()
	}
	labelled, err := t.targetsLabelled(ctx, existing, next, nodes)
	if err != nil || !labelled {
		t.labelledSince.Delete(existing.UID)
		if err == nil {
			keep()
		}
		return !labelled, 0, err
	}
	since, _ := t.labelledSince.LoadOrStore(existing.UID, time.Now())
	if settling = selectorSettle - time.Since(since.(time.Time)); settling > 0 {
		keep()
		return true, settling, nil
	}
	t.labelledSince.Delete(existing.UID)
	return false, 0, nil
}

// targetsLabelled reports whether every NetworkInterface the routing of the existing
// LoadBalancer sends to, of an eligible Node, matches the next selector in this cache.
func (t *Controller) targetsLabelled(ctx context.Context, existing *networkingv1alpha1.LoadBalancer, next *metav1.LabelSelector, nodes []*corev1.Node) (bool, error) {
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
	eligible, err := t.EligibleNetworkInterfaces(ctx, nodes, routed)
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
