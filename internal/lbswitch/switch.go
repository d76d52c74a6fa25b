// Package lbswitch is the state machine of a Service's type switch (Public to Internal or
// back). IronCore cannot change a LoadBalancer's type, so a switch makes a successor of the
// new type beside the old one; the Service keeps the old one's addresses, which carry its
// traffic, until the successor has its own and a destination; then the Service shows the
// successor's addresses, and only once it does is the old one deleted. No step loses the
// Service's traffic: at every point the addresses it shows lead somewhere.
package lbswitch

import (
	"slices"
	"strings"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
)

// Phase is where a Service's switch stands, and so what its sync does next.
type Phase string

const (
	// None means the Service has one LoadBalancer, of the type it asks for; no switch.
	None Phase = "None"
	// Begin means the Service's LoadBalancer is of the other type; a successor is made beside it.
	Begin Phase = "Begin"
	// Prepare means the successor has no addresses or no destination yet; the Service keeps
	// showing the addresses of the LoadBalancer it replaces.
	Prepare Phase = "Prepare"
	// HandOver means the successor is ready; the Service's status is to show its addresses.
	HandOver Phase = "HandOver"
	// Release means the Service shows the successor's addresses; the replaced LoadBalancers are
	// deleted.
	Release Phase = "Release"
)

// State is what a sync of the Service found.
type State struct {
	// CurrentOfOtherType is true when the Service's current LoadBalancer (of the type it asks
	// for if it has one) is of the other type and not being deleted.
	CurrentOfOtherType bool
	// Replaced counts the Service's other LoadBalancers, of the other type and not being
	// deleted.
	Replaced int
	// SuccessorReady is true when the LoadBalancer of the type the Service asks for has every
	// address it should have and a destination (or no target is expected).
	SuccessorReady bool
	// ShowsSuccessor is true when the Service's status shows exactly the successor's addresses.
	ShowsSuccessor bool
}

// Next returns the phase of a switch in the state s.
func Next(s State) Phase {
	switch {
	case s.CurrentOfOtherType:
		return Begin
	case s.Replaced == 0:
		return None
	case !s.SuccessorReady:
		return Prepare
	case !s.ShowsSuccessor:
		return HandOver
	default:
		return Release
	}
}

// SuccessorName names the LoadBalancer that replaces existing when the Service's type switches
// to lbType: the Service's name (see lbspec.Name) if existing has another, else that name with
// the type.
func SuccessorName(service *corev1.Service, existing *networkingv1alpha1.LoadBalancer, lbType networkingv1alpha1.LoadBalancerType) string {
	name := lbspec.Name(service)
	if existing.Name != name {
		return name
	}
	return name + "-" + strings.ToLower(string(lbType))
}

// Shows tells whether the Service's status shows exactly the addresses in status.
func Shows(service *corev1.Service, status *corev1.LoadBalancerStatus) bool {
	if len(status.Ingress) == 0 || len(service.Status.LoadBalancer.Ingress) != len(status.Ingress) {
		return false
	}
	for i, ingress := range status.Ingress {
		if service.Status.LoadBalancer.Ingress[i].IP != ingress.IP {
			return false
		}
	}
	return true
}

// ToRetain picks, of a Service's LoadBalancers (during a switch, more than one; the current
// one last), the one to retain when the Service goes: the one whose addresses it shows, which
// its clients use, else the current one. -1 if there is none.
func ToRetain(service *corev1.Service, lbs []*networkingv1alpha1.LoadBalancer) int {
	if i := slices.IndexFunc(lbs, func(lb *networkingv1alpha1.LoadBalancer) bool { return Shows(service, lbspec.Status(lb)) }); i >= 0 {
		return i
	}
	return len(lbs) - 1
}
