package provider

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	commonv1alpha1 "github.com/ironcore-dev/ironcore/api/common/v1alpha1"
	ipamv1alpha1 "github.com/ironcore-dev/ironcore/api/ipam/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	"github.com/ironcore-dev/ironcore/utils/equality"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/clusterid"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
)

// loadBalancerSettings are the cloud settings IronCore LoadBalancers are built from.
type loadBalancerSettings struct {
	cluster string
	// aliases are the cluster's earlier names; LoadBalancers recording one are adopted.
	aliases []string
	// clusterID is the cluster's identity, written on LoadBalancers once it is known.
	clusterID *clusterid.ID
	network   string
	// internalPrefixes are the parent Prefixes of internal load balancer addresses, by family.
	internalPrefixes map[corev1.IPFamily]string
	useNICSelector   bool
}

// LoadBalancerName is the name of a Service's IronCore LoadBalancer: its UID without dashes,
// as the reference CCM names them.
func LoadBalancerName(service *corev1.Service) string {
	return strings.ReplaceAll(string(service.UID), "-", "")
}

// legacyLoadBalancerName is the name older reference CCMs gave a Service's LoadBalancer.
func legacyLoadBalancerName(cluster string, service *corev1.Service) string {
	uidPrefix, _, _ := strings.Cut(string(service.UID), "-")
	return cluster + "-" + service.Name + "-" + uidPrefix
}

// desiredLoadBalancer returns the IronCore LoadBalancer a Service asks for, or a serviceError
// naming what in the Service cannot be served. It has no side effects.
func desiredLoadBalancer(service *corev1.Service, settings loadBalancerSettings) (*networkingv1alpha1.LoadBalancer, error) {
	internal, err := isInternal(service)
	if err != nil {
		return nil, err
	}
	families := service.Spec.IPFamilies
	if len(families) == 0 {
		families = []corev1.IPFamily{corev1.IPv4Protocol}
	}
	ports, err := loadBalancerPorts(service)
	if err != nil {
		return nil, err
	}
	lb := &networkingv1alpha1.LoadBalancer{
		ObjectMeta: metav1.ObjectMeta{
			Name:        LoadBalancerName(service),
			Labels:      ownerLabels(settings, service),
			Annotations: ownerAnnotations(settings.cluster, service),
		},
		Spec: networkingv1alpha1.LoadBalancerSpec{
			Type:       networkingv1alpha1.LoadBalancerTypePublic,
			IPFamilies: slices.Clone(families),
			NetworkRef: corev1.LocalObjectReference{Name: settings.network},
			Ports:      ports,
		},
	}
	if internal {
		requested, err := requestedIPs(service, families)
		if err != nil {
			return nil, err
		}
		lb.Spec.Type = networkingv1alpha1.LoadBalancerTypeInternal
		lb.Spec.IPs, err = internalIPs(families, requested, settings.internalPrefixes)
		if err != nil {
			return nil, err
		}
	} else if strings.TrimSpace(service.Annotations[keys.AnnotationLoadBalancerIPs]) != "" {
		// spec.loadBalancerIP on a Public Service is ignored with an event (ignoredFields), as
		// the reference CCM ignored it; our own annotation was never accepted there.
		return nil, &serviceError{reason: ReasonInvalidLoadBalancerIP, message: fmt.Sprintf(
			"a Public IronCore LoadBalancer cannot have a requested address (%s); remove it, or make the load balancer Internal with %s: \"true\"",
			keys.AnnotationLoadBalancerIPs, keys.AnnotationInternalLoadBalancer)}
	}
	if usesSelector(service, settings) {
		lb.Spec.NetworkInterfaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{
			keys.LabelCluster:            settings.cluster,
			keys.LabelLoadBalancerTarget: settings.cluster,
		}}
	}
	return lb, nil
}

// isInternal reads the internal annotation. Only "true" and "false" are accepted: the
// reference CCM treated anything but "true" as Public, so guessing at other spellings could
// turn an existing Public LoadBalancer Internal and change its address.
func isInternal(service *corev1.Service) (bool, error) {
	value, ok := service.Annotations[keys.AnnotationInternalLoadBalancer]
	switch {
	case !ok || value == "false":
		return false, nil
	case value == "true":
		return true, nil
	default:
		return false, &serviceError{reason: ReasonInvalidAnnotation, message: fmt.Sprintf(
			"annotation %s must be \"true\" or \"false\", not %q", keys.AnnotationInternalLoadBalancer, value)}
	}
}

// requestedIPs collects the addresses asked for with spec.loadBalancerIP and our annotation,
// at most one per IP family of the Service. Each problem names the field it is in.
func requestedIPs(service *corev1.Service, families []corev1.IPFamily) (map[corev1.IPFamily]netip.Addr, error) {
	type request struct{ field, value string }
	var requests []request
	if ip := strings.TrimSpace(service.Spec.LoadBalancerIP); ip != "" {
		requests = append(requests, request{"spec.loadBalancerIP", ip})
	}
	if list, ok := service.Annotations[keys.AnnotationLoadBalancerIPs]; ok {
		for _, ip := range strings.Split(list, ",") {
			if ip = strings.TrimSpace(ip); ip != "" {
				requests = append(requests, request{"annotation " + keys.AnnotationLoadBalancerIPs, ip})
			}
		}
	}
	requested := map[corev1.IPFamily]netip.Addr{}
	fieldOf := map[corev1.IPFamily]string{}
	for _, r := range requests {
		addr, err := netip.ParseAddr(r.value)
		if err != nil || addr.Zone() != "" {
			return nil, &serviceError{reason: ReasonInvalidLoadBalancerIP, message: fmt.Sprintf("requested load balancer address %q (%s) is not an IP address", r.value, r.field)}
		}
		addr = addr.Unmap()
		family := familyOf(addr)
		if !slices.Contains(families, family) {
			return nil, &serviceError{reason: ReasonInvalidLoadBalancerIP, message: fmt.Sprintf(
				"requested load balancer address %s (%s) is %s, but the Service's IP families are %v", addr, r.field, family, families)}
		}
		if previous, ok := requested[family]; ok && previous != addr {
			return nil, &serviceError{reason: ReasonInvalidLoadBalancerIP, message: fmt.Sprintf(
				"requested load balancer addresses %s (%s) and %s (%s) are both %s; give at most one per family", previous, fieldOf[family], addr, r.field, family)}
		}
		requested[family], fieldOf[family] = addr, r.field
	}
	return requested, nil
}

// internalIPs gives each family the requested address, or one allocated from the family's
// Prefix. The prefix template is spelled out in full, as IronCore would default it, so that
// the desired spec compares equal to the stored one and an unchanged Service causes no write.
func internalIPs(families []corev1.IPFamily, requested map[corev1.IPFamily]netip.Addr, prefixes map[corev1.IPFamily]string) ([]networkingv1alpha1.IPSource, error) {
	var sources []networkingv1alpha1.IPSource
	for _, family := range families {
		if addr, ok := requested[family]; ok {
			sources = append(sources, networkingv1alpha1.IPSource{Value: &commonv1alpha1.IP{Addr: addr}})
			continue
		}
		parent := prefixes[family]
		if parent == "" {
			key := "prefixName"
			if family == corev1.IPv6Protocol {
				key = "ipv6PrefixName"
			}
			return nil, &serviceError{reason: ReasonInternalPrefixMissing, message: fmt.Sprintf(
				"an Internal LoadBalancer needs an %s address, but the cloud-config names no Prefix to allocate it from (%s); request one with %s, or ask the cluster operator to set %s",
				family, key, keys.AnnotationLoadBalancerIPs, key)}
		}
		sources = append(sources, networkingv1alpha1.IPSource{Ephemeral: &networkingv1alpha1.EphemeralPrefixSource{
			PrefixTemplate: &ipamv1alpha1.PrefixTemplateSpec{Spec: ipamv1alpha1.PrefixSpec{
				IPFamily:     family,
				PrefixLength: hostPrefixLength(family),
				ParentRef:    &corev1.LocalObjectReference{Name: parent},
			}},
		}})
	}
	return sources, nil
}

// ignoredFields lists what the Service asks for that its LoadBalancer does not do, as events
// for its owner. It has no side effects.
func ignoredFields(service *corev1.Service) []serviceError {
	var notes []serviceError
	if len(service.Spec.LoadBalancerSourceRanges) > 0 {
		notes = append(notes, serviceError{reason: ReasonSourceRangesOnNodes, message: fmt.Sprintf("IronCore LoadBalancers do not filter "+
			"clients themselves; they forward packets unchanged, with the client's address and the load balancer address, to the Nodes, "+
			"where kube-proxy admits only spec.loadBalancerSourceRanges (%s). A replacement for kube-proxy must enforce them itself.",
			strings.Join(service.Spec.LoadBalancerSourceRanges, ", "))})
	}
	if ip := strings.TrimSpace(service.Spec.LoadBalancerIP); ip != "" {
		if internal, err := isInternal(service); err == nil && !internal {
			notes = append(notes, serviceError{reason: ReasonLoadBalancerIPIgnored, message: fmt.Sprintf(
				"IronCore chooses the address of a Public LoadBalancer; spec.loadBalancerIP %s is ignored. "+
					"An Internal LoadBalancer (%s: \"true\") can have a requested address.", ip, keys.AnnotationInternalLoadBalancer)})
		}
	}
	return notes
}

// keepAddresses keeps the address sources of an existing Internal LoadBalancer in desired:
// changing them would change the LoadBalancer's address under its clients (a requested
// address, or the Prefix in the cloud-config, applies to new LoadBalancers). It returns an
// event for the owner when the Service requests an address the LoadBalancer does not have.
func keepAddresses(service *corev1.Service, existing, desired *networkingv1alpha1.LoadBalancer) []serviceError {
	if existing.Spec.Type != networkingv1alpha1.LoadBalancerTypeInternal || desired.Spec.Type != networkingv1alpha1.LoadBalancerTypeInternal {
		return nil
	}
	desired.Spec.IPs = slices.Clone(existing.Spec.IPs)
	requested, err := requestedIPs(service, desired.Spec.IPFamilies)
	if err != nil {
		return nil
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
		return nil
	}
	return []serviceError{{reason: ReasonLoadBalancerIPKept, message: fmt.Sprintf(
		"IronCore LoadBalancer %s keeps its addresses; the requested %s would change them under the Service's clients. "+
			"A requested address applies when a LoadBalancer is created: re-create the Service to move it.",
		existing.Name, strings.Join(missing, ", "))}}
}

// loadBalancerPorts maps the Service's ports. IronCore's own validation misses some invalid
// ports (it accepts a lone port 70000, checking a port only against the ones before it), so they
// are checked here, before anything is written.
func loadBalancerPorts(service *corev1.Service) ([]networkingv1alpha1.LoadBalancerPort, error) {
	var errs []error
	ports := make([]networkingv1alpha1.LoadBalancerPort, 0, len(service.Spec.Ports))
	for i, port := range service.Spec.Ports {
		protocol := port.Protocol
		if protocol == "" {
			protocol = corev1.ProtocolTCP
		}
		switch {
		case protocol != corev1.ProtocolTCP && protocol != corev1.ProtocolUDP && protocol != corev1.ProtocolSCTP:
			errs = append(errs, fmt.Errorf("spec.ports[%d] (%q): protocol %s is not supported (TCP, UDP or SCTP)", i, port.Name, protocol))
		case port.Port < 1 || port.Port > 65535:
			errs = append(errs, fmt.Errorf("spec.ports[%d] (%q): %d is not a port number (1-65535)", i, port.Name, port.Port))
		default:
			ports = append(ports, networkingv1alpha1.LoadBalancerPort{Protocol: &protocol, Port: port.Port})
		}
	}
	if len(errs) > 0 {
		return nil, &serviceError{reason: ReasonUnsupportedPort, message: errors.Join(errs...).Error()}
	}
	return ports, nil
}

// ownerLabels record the Service and cluster a LoadBalancer is for and, once it is known, the
// cluster's identity, which the orphan collector requires before it deletes anything. Until
// then the label is left out; the first apply after it is known adds it, as needsApply sees
// it missing.
func ownerLabels(settings loadBalancerSettings, service *corev1.Service) map[string]string {
	labels := map[string]string{
		keys.LabelClusterName:      settings.cluster,
		keys.LabelServiceNamespace: service.Namespace,
		keys.LabelServiceName:      service.Name,
		keys.LabelServiceUID:       string(service.UID),
	}
	if id, known := settings.clusterID.Known(); known {
		labels[keys.LabelClusterID] = id
	}
	return labels
}

func ownerAnnotations(cluster string, service *corev1.Service) map[string]string {
	return map[string]string{
		keys.AnnotationClusterName:      cluster,
		keys.AnnotationServiceNamespace: service.Namespace,
		keys.AnnotationServiceName:      service.Name,
		keys.AnnotationServiceUID:       string(service.UID),
	}
}

// needsApply reports whether the stored LoadBalancer differs from the desired one in anything
// the CCM sets.
func needsApply(existing, desired *networkingv1alpha1.LoadBalancer) bool {
	return !equality.Semantic.DeepEqual(existing.Spec, desired.Spec) ||
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

func familyOf(addr netip.Addr) corev1.IPFamily {
	if addr.Is4() {
		return corev1.IPv4Protocol
	}
	return corev1.IPv6Protocol
}

func hostPrefixLength(family corev1.IPFamily) int32 {
	if family == corev1.IPv6Protocol {
		return 128
	}
	return 32
}

// loadBalancerStatus turns the LoadBalancer's addresses into ingress points. Their ipMode is
// VIP: IronCore LoadBalancers forward packets with the load balancer address as destination,
// so kube-proxy on the Node must handle that address, and in-cluster clients may be sent
// straight to the Service (KEP-1860).
func loadBalancerStatus(lb *networkingv1alpha1.LoadBalancer) *corev1.LoadBalancerStatus {
	status := &corev1.LoadBalancerStatus{}
	for _, ip := range lb.Status.IPs {
		status.Ingress = append(status.Ingress, corev1.LoadBalancerIngress{IP: ip.String(), IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)})
	}
	return status
}

// allocated reports whether IronCore has given the LoadBalancer an address of every family,
// including every requested one.
func allocated(lb, desired *networkingv1alpha1.LoadBalancer) bool {
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
