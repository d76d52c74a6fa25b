package ironcore

import (
	"net/netip"
	"slices"
	"time"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
)

// RouteWait tells how long a change to a new Node's NetworkInterface may wait for the write of the
// Node's route, to go with it: every NetworkInterface patch makes IronCore reconcile every
// LoadBalancer on the Network, and a new Node's route is usually written seconds after it joins.
type RouteWait struct {
	// Network is the Network on which this CCM routes the Nodes' pod CIDRs (its route controller
	// runs), or empty: then nothing waits.
	Network string
	// Cluster names the pod CIDR entries IronCore allocates for this cluster, which route already.
	Cluster string
	// For bounds the wait, from the Node's creation: a route not written by then is no reason to
	// hold anything back any longer.
	For time.Duration
}

// Left returns how much longer a change to nic may wait for the route: while nic is on the routed
// Network, the Node has pod CIDRs and one of them is not yet a literal prefix of nic, until the
// Node is For old. Zero means the change is written now.
func (w RouteWait) Left(node *corev1.Node, nic *networkingv1alpha1.NetworkInterface, now time.Time) time.Duration {
	if w.Network == "" || nic.Spec.NetworkRef.Name != w.Network || len(node.Spec.PodCIDRs) == 0 {
		return 0
	}
	left := node.CreationTimestamp.Add(w.For).Sub(now)
	if left <= 0 || len(PodCIDREntries(nic, w.Cluster)) > 0 {
		// IronCore's own allocations route without a write of this CCM.
		return 0
	}
	for _, cidr := range node.Spec.PodCIDRs {
		if !hasLiteralPrefix(nic, cidr) {
			return left
		}
	}
	return 0
}

// hasLiteralPrefix tells whether cidr is a literal prefix of the NetworkInterface.
func hasLiteralPrefix(nic *networkingv1alpha1.NetworkInterface, cidr string) bool {
	want, err := netip.ParsePrefix(cidr)
	if err != nil {
		return false
	}
	return slices.ContainsFunc(nic.Spec.Prefixes, func(source networkingv1alpha1.PrefixSource) bool {
		return source.Value != nil && source.Value.Masked() == want.Masked()
	})
}
