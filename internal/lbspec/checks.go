package lbspec

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	commonv1alpha1 "github.com/ironcore-dev/ironcore/api/common/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	"github.com/ironcore-dev/ironcore/utils/equality"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
)

// IgnoredFields lists what the Service asks for that its LoadBalancer, existing (nil when one
// is to be made), does not do, as events for its owner.
func IgnoredFields(service *corev1.Service, existing *networkingv1alpha1.LoadBalancer) []Problem {
	var notes []Problem
	if len(service.Spec.LoadBalancerSourceRanges) > 0 {
		notes = append(notes, Problem{Reason: ReasonSourceRangesOnNodes, Message: fmt.Sprintf("IronCore LoadBalancers do not filter "+
			"clients themselves; they forward packets unchanged, with the client's address and the load balancer address, to the Nodes, "+
			"where kube-proxy admits only spec.loadBalancerSourceRanges (%s). A replacement for kube-proxy must enforce them itself.",
			strings.Join(service.Spec.LoadBalancerSourceRanges, ", "))})
	}
	if name, named := service.Annotations[keys.AnnotationLoadBalancerName]; named && existing != nil && existing.Name != name {
		notes = append(notes, Problem{Reason: ReasonNotAdopted, Message: fmt.Sprintf(
			"annotation %s names IronCore LoadBalancer %s, but the Service has LoadBalancer %s and keeps it; the annotation applies to a Service without one",
			keys.AnnotationLoadBalancerName, name, existing.Name)})
	}
	internal, err := Internal(service)
	if err != nil {
		return notes
	}
	notes = append(notes, ignoredPrefixes(service, internal)...)
	if internal {
		return notes
	}
	requested, err := requestedIPs(service, ipFamilies(service))
	if err != nil || len(requested) == 0 {
		return notes
	}
	var ignored []string
	for _, addr := range requested {
		if existing == nil || !slices.ContainsFunc(existing.Status.IPs, func(ip commonv1alpha1.IP) bool { return ip.Unmap() == addr }) {
			ignored = append(ignored, addr.String())
		}
	}
	if len(ignored) > 0 {
		slices.Sort(ignored)
		notes = append(notes, Problem{Reason: ReasonLoadBalancerIPIgnored, Message: fmt.Sprintf(
			"the requested address %s is ignored: IronCore chooses the addresses of Public LoadBalancers, and a Public Service gets a requested "+
				"address only by taking over, when it has no LoadBalancer, one this cluster retained that holds it. An Internal LoadBalancer (%s: \"true\") can have a requested address.",
			strings.Join(ignored, ", "), keys.AnnotationInternalLoadBalancer)})
	}
	return notes
}

// KeepAddresses keeps an existing Internal LoadBalancer's address sources in desired: changing
// them would move its address under its clients. A requested address it lacks is a Problem.
func KeepAddresses(service *corev1.Service, existing, desired *networkingv1alpha1.LoadBalancer) []Problem {
	if existing.Spec.Type != networkingv1alpha1.LoadBalancerTypeInternal || desired.Spec.Type != networkingv1alpha1.LoadBalancerTypeInternal {
		return nil
	}
	desired.Spec.IPs = slices.Clone(existing.Spec.IPs)
	kept := keptPrefixes(service, existing)
	requested, err := requestedIPs(service, desired.Spec.IPFamilies)
	if err != nil {
		return kept
	}
	have := map[netip.Addr]bool{}
	for _, ip := range existing.Status.IPs {
		have[ip.Addr] = true
	}
	for _, source := range existing.Spec.IPs {
		if source.Value != nil {
			have[source.Value.Addr] = true
		}
	}
	var missing []string
	for _, family := range desired.Spec.IPFamilies {
		if addr, ok := requested[family]; ok && !have[addr] {
			missing = append(missing, addr.String())
		}
	}
	if len(missing) == 0 {
		return kept
	}
	return append(kept, Problem{Reason: ReasonLoadBalancerIPKept, Message: fmt.Sprintf(
		"IronCore LoadBalancer %s keeps its addresses; the requested %s would change them under the Service's clients. "+
			"A requested address applies when a LoadBalancer is created: re-create the Service to move it.",
		existing.Name, strings.Join(missing, ", "))})
}

// NeedsApply reports whether existing differs from desired in anything the CCM sets, or keeps a
// wish to retain it that the Service dropped.
func NeedsApply(existing, desired *networkingv1alpha1.LoadBalancer) bool {
	_, wishGone := desired.Labels[keys.LabelRetainRequested]
	wishGone = !wishGone && existing.Labels[keys.LabelRetainRequested] != ""
	return !equality.Semantic.DeepEqual(existing.Spec, desired.Spec) || wishGone ||
		!containsAll(existing.Labels, desired.Labels) ||
		!containsAll(existing.Annotations, desired.Annotations)
}

func containsAll(have, want map[string]string) bool {
	for k, v := range want {
		if value, ok := have[k]; !ok || value != v {
			return false
		}
	}
	return true
}

// Status turns the LoadBalancer's addresses into ingress points of ipMode VIP (KEP-1860): IronCore
// forwards packets to the load balancer address, which kube-proxy on the Node must handle.
func Status(lb *networkingv1alpha1.LoadBalancer) *corev1.LoadBalancerStatus {
	status := &corev1.LoadBalancerStatus{}
	for _, ip := range lb.Status.IPs {
		status.Ingress = append(status.Ingress, corev1.LoadBalancerIngress{IP: ip.String(), IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)})
	}
	return status
}

// Allocated reports whether IronCore has given the LoadBalancer an address of every family,
// including every requested one.
func Allocated(lb, desired *networkingv1alpha1.LoadBalancer) bool {
	have := map[corev1.IPFamily]bool{}
	addresses := map[string]bool{}
	for _, ip := range lb.Status.IPs {
		have[ip.Family()] = true
		addresses[ip.String()] = true
	}
	for _, family := range desired.Spec.IPFamilies {
		if !have[family] {
			return false
		}
	}
	for _, source := range desired.Spec.IPs {
		if source.Value != nil && !addresses[source.Value.String()] {
			return false
		}
	}
	return true
}

// Pending says what a LoadBalancer's status waits for before it is reported on its Service.
type Pending int

const (
	// NotPending means the status is reported, or there is none to report.
	NotPending Pending = iota
	// PendingAddresses means IronCore has not allocated every address yet.
	PendingAddresses
	// PendingTraffic means the routing has no destination yet while the target rules choose some.
	PendingTraffic
)
